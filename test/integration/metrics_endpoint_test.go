package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/test/framework"
)

// repoRoot is the repository, relative to this package.
var repoRoot = filepath.Join("..", "..")

// The operator binary's metrics endpoint with its shipped defaults: HTTPS, every request's token
// reviewed by the API server and its identity authorized for get on /metrics. The binary runs as
// its ServiceAccount, bound to the shipped ClusterRole, which must let it review tokens.
var _ = Describe("The operator's metrics endpoint", Ordered, func() {
	var (
		bin, kubeconfig, ns string
		reader, stranger    string // tokens of ServiceAccounts with and without the metrics-reader ClusterRole
		addr                string // where the binary serves its metrics
		stopBinary          func()
	)

	BeforeAll(func(ctx SpecContext) {
		bin = filepath.Join(GinkgoT().TempDir(), "teardown-operator")
		build := exec.Command("go", "build", "-o", bin, "./cmd/teardown-operator")
		build.Dir = repoRoot
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build: %s", out)

		Expect(framework.BindOperatorRole(ctx, k8s, repoRoot, framework.OperatorNamespace, framework.OperatorName)).To(Succeed())
		kubeconfig = writeKubeconfig(tokenConfig(ctx, framework.OperatorNamespace, framework.OperatorName))
		ns = newNamespace(ctx)
		reader, stranger = metricsReaderToken(ctx, ns, "prometheus"), serviceAccountToken(ctx, ns, "stranger")

		// The suite's operator stops meanwhile: two operators would both act on every policy.
		stopOperator()
		DeferCleanup(func() { stopOperator = startOperator() })
		addr = freeLoopbackAddr()
		stopBinary = startOperatorBinary(bin, kubeconfig, "--metrics-bind-address", addr)
		DeferCleanup(func() { stopBinary() })
		Eventually(func() (int, error) { code, _, err := scrape(addr, "", nil); return code, err }, 30*time.Second).
			Should(Equal(http.StatusUnauthorized), "the binary serves its metrics")
	})

	It("serves no metrics over plain HTTP, nor without a token (401)", func() {
		resp, err := http.Get("http://" + addr + "/metrics")
		Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "Go's TLS server answers plain HTTP with 400")
		code, body, err := scrape(addr, "", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusUnauthorized), body)
		// A token the API server does not authenticate is refused too, with 401.
		code, body, err = scrape(addr, "not-a-token", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusUnauthorized), body)
		Expect(body).To(ContainSubstring("does not authenticate"))
	})

	It("refuses a ServiceAccount without the metrics-reader ClusterRole (403)", func() {
		code, body, err := scrape(addr, stranger, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusForbidden), body)
		Expect(body).NotTo(ContainSubstring("teardown_"))
	})

	It("serves the teardown_ metrics to a ServiceAccount bound to the metrics-reader ClusterRole (200)", func(ctx SpecContext) {
		p := namespacedPolicy(ns, "scraped", waitStep("settle", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Expect(k8s.Create(ctx, configMap(ns, "counted", map[string]string{"app": "scraped"}))).To(Succeed())
		series := fmt.Sprintf(`teardown_protected_objects{policy="TeardownPolicy/%s/scraped"} 1`, ns)
		Eventually(func(g Gomega) {
			code, body, err := scrape(addr, reader, nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK), body)
			g.Expect(body).To(ContainSubstring(series))
		}, 30*time.Second).Should(Succeed())
	})

	It("serves the certificate given with --metrics-cert-dir, which a client can verify", func() {
		dir := GinkgoT().TempDir()
		cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(dir, "tls.crt"), cert, 0o600)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600)).To(Succeed())
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM(cert)).To(BeTrue())

		Expect(scrape(addr, reader, roots)).Error().To(HaveOccurred(), "the self-signed certificate the operator makes is not this one")
		stopBinary()
		stopBinary = startOperatorBinary(bin, kubeconfig, "--metrics-bind-address", addr, "--metrics-cert-dir", dir)
		DeferCleanup(stopBinary) // before dir goes, which it watches
		Eventually(func() (int, error) { code, _, err := scrape(addr, reader, roots); return code, err }, 30*time.Second).
			Should(Equal(http.StatusOK))
	})
})

// metricsReaderToken binds the ClusterRole of config/rbac/metrics_reader_role.yaml to the
// ServiceAccount ns/name, as the docs tell users to bind Prometheus', and returns its token.
func metricsReaderToken(ctx context.Context, ns, name string) string {
	GinkgoHelper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "config", "rbac", "metrics_reader_role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	Expect(yaml.UnmarshalStrict(raw, role)).To(Succeed())
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, role))).To(Succeed())
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}
	Expect(k8s.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(k8s.Delete(ctx, binding)).To(Succeed()) })
	return serviceAccountToken(ctx, ns, name)
}

// startOperatorBinary runs the operator binary against the suite's API server with kubeconfig,
// without leader election (no lease left behind for other specs to find), and returns a function
// that stops it as its pod would be stopped, once however often it is called.
func startOperatorBinary(bin, kubeconfig string, args ...string) func() {
	GinkgoHelper()
	log := &framework.SyncBuffer{}
	op := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig, "--run-namespace", runNamespace, "--leader-elect=false",
		"--health-probe-bind-address", "127.0.0.1:0"}, args...)...)
	op.Stdout, op.Stderr = log, log
	Expect(op.Start()).To(Succeed())
	exited := make(chan struct{})
	go func() { _ = op.Wait(); close(exited) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			if CurrentSpecReport().Failed() {
				AddReportEntry("operator binary's log", log.String())
			}
			_ = op.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = op.Process.Kill()
				<-exited
			}
		})
	}
}

// scrape reads the metrics endpoint at addr over HTTPS, as Prometheus would, with a bearer token
// unless it is empty, verifying the server's certificate against roots, or not when roots is nil
// (the ServiceMonitor's default: the operator's own certificate is self-signed).
func scrape(addr, token string, roots *x509.CertPool) (int, string, error) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, InsecureSkipVerify: roots == nil}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
