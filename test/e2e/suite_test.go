// Package e2e runs the operator binary against the local kwok cluster, where the real
// controller-manager runs garbage collection, namespace deletion and Jobs.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

const runNamespace = "teardown-system"

var (
	root       = filepath.Join("..", "..")
	k8s        client.Client
	probe      framework.Probe
	kubeconfig string
	operator   *exec.Cmd
	opLog      bytes.Buffer
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "E2E Suite (kwok)")
}

var _ = BeforeSuite(func() {
	By("starting the kwok cluster")
	out, err := exec.Command("bash", filepath.Join(root, "test", "cluster", "up.sh")).Output()
	Expect(err).NotTo(HaveOccurred(), "test/cluster/up.sh: %s", exitStderr(err))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	kubeconfig = lines[len(lines)-1]
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	probe = framework.Probe{Client: k8s}

	By("installing the CRDs")
	ctx := context.Background()
	installCRDs(ctx, filepath.Join(root, "config", "crd", "bases"))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: runNamespace}}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, ns))).To(Succeed())

	By("building and starting the operator binary")
	bin := filepath.Join(GinkgoT().TempDir(), "teardown-operator")
	build := exec.Command("go", "build", "-o", bin, "./cmd/teardown-operator")
	build.Dir = root
	buildOut, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(buildOut))
	operator = exec.Command(bin, "--kubeconfig", kubeconfig, "--run-namespace", runNamespace,
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0")
	operator.Stdout, operator.Stderr = &opLog, &opLog
	Expect(operator.Start()).To(Succeed())
})

var _ = AfterSuite(func() {
	if operator != nil && operator.Process != nil {
		_ = operator.Process.Signal(os.Interrupt)
		_ = operator.Wait()
	}
	if CurrentSpecReport().Failed() || os.Getenv("E2E_OPERATOR_LOG") != "" {
		GinkgoWriter.Println(opLog.String())
	}
	if os.Getenv("E2E_KEEP_CLUSTER") == "" {
		cmd := exec.Command("bash", filepath.Join(root, "test", "cluster", "down.sh"))
		cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
		Expect(cmd.Run()).To(Succeed())
	}
})

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		AddReportEntry("operator log", opLog.String())
	}
})

func installCRDs(ctx context.Context, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	Expect(err).NotTo(HaveOccurred())
	for _, f := range files {
		raw, err := os.ReadFile(f)
		Expect(err).NotTo(HaveOccurred())
		crd := &apiextensionsv1.CustomResourceDefinition{}
		Expect(utilyaml.Unmarshal(raw, crd)).To(Succeed())
		existing := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(crd), existing); err == nil {
			crd.ResourceVersion = existing.ResourceVersion
			Expect(k8s.Update(ctx, crd)).To(Succeed())
		} else {
			Expect(k8s.Create(ctx, crd)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(crd), existing)).To(Succeed())
			ok := false
			for _, c := range existing.Status.Conditions {
				ok = ok || c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
			}
			g.Expect(ok).To(BeTrue())
		}, 30*time.Second).Should(Succeed())
	}
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return fmt.Sprint(err)
}

func newNamespace(ctx context.Context, name string) string {
	ns := fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%100000)
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	return ns
}
