// Package chaos proves the engine's guarantees under faults on the local kwok cluster: the
// operator killed with SIGKILL mid pipeline, again and again. Its size comes from the environment
// (CHAOS_OBJECTS, CHAOS_KILLS): `make chaos` runs the full size, `make test` a small one.
package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/test/framework"
)

const (
	runNamespace = "teardown-system"
	// clusterName keeps the suite's cluster apart from the e2e suite's, the demo's and the
	// benchmark's.
	clusterName = "teardown-chaos"
)

var (
	root        = filepath.Join("..", "..")
	k8s         client.Client
	cfg         *rest.Config
	kubeconfig  string
	operatorBin string
	// faultBin is the operator built with fault injection (internal/faultinject).
	faultBin string
	// logDir keeps every operator process's log (a file per process, in start order); a failed
	// spec prints where it is. CHAOS_LOG_DIR chooses it (and keeps it); otherwise a temporary
	// directory, removed when every spec passed.
	logDir string
	// failed is set once a spec has failed.
	failed bool
	// deleteRequest is the value of the delete requests the suite's client makes: "<its user
	// name>: fault suite", as the admission policy that checks requests admits.
	deleteRequest string
)

func TestChaos(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Chaos Suite (kwok)")
}

// sizeFromEnv reads a positive integer from the environment, or returns def.
func sizeFromEnv(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

var _ = BeforeSuite(func() {
	var err error
	policy, err := filepath.Abs("audit-policy.yaml")
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err = framework.StartCluster(root, clusterName, "AUDIT_POLICY="+policy)
	Expect(err).NotTo(HaveOccurred())
	cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	// The suite's own load (the soak's churn) must not wait on client-side throttling.
	cfg.QPS, cfg.Burst = 500, 1000
	k8s, err = framework.Client(cfg)
	Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	Expect(framework.InstallCRDs(ctx, k8s, filepath.Join(root, "config", "crd", "bases"))).To(Succeed())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: runNamespace}}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, ns))).To(Succeed())
	// Delete requests count only while the admission policy that checks requests is in force.
	Expect(framework.InstallRequestsPolicy(ctx, k8s, root)).To(Succeed())
	Expect(framework.AwaitRequestsTrusted(ctx, k8s)).To(Succeed())
	deleteRequest, err = framework.Request(ctx, k8s, "fault suite")
	Expect(err).NotTo(HaveOccurred())

	logDir = os.Getenv("CHAOS_LOG_DIR")
	if logDir == "" {
		logDir, err = os.MkdirTemp("", "teardown-chaos-logs-")
	}
	Expect(err).NotTo(HaveOccurred())
	Expect(os.MkdirAll(logDir, 0o755)).To(Succeed())

	operatorBin = buildOperator()
	faultBin = buildOperator("-tags", "faultinject")
})

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		failed = true
		AddReportEntry("operator logs", "every operator process's log is in "+logDir)
	}
})

var _ = AfterSuite(func() {
	if !failed && os.Getenv("CHAOS_LOG_DIR") == "" {
		_ = os.RemoveAll(logDir) // nothing to look at
	}
	// CHAOS_KEEP_CLUSTER=1 keeps the cluster (its audit log) for a look; =failed only when a spec failed.
	if keep := os.Getenv("CHAOS_KEEP_CLUSTER"); keep == "" || keep == "failed" && !failed {
		Expect(framework.StopCluster(root, clusterName)).To(Succeed())
	}
})

// buildOperator builds the operator binary with the given go build flags.
func buildOperator(flags ...string) string {
	GinkgoHelper()
	bin := filepath.Join(GinkgoT().TempDir(), "teardown-operator")
	if len(flags) > 0 {
		bin += "-" + flags[len(flags)-1]
	}
	build := exec.Command("go", append(append([]string{"build", "-o", bin}, flags...), "./cmd/teardown-operator")...)
	build.Dir = root
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	return bin
}
