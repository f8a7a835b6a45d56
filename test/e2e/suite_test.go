// Package e2e runs the operator binary against the local kwok cluster, where the real
// controller-manager runs garbage collection, namespace deletion and Jobs.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/test/framework"
)

const (
	runNamespace = "teardown-system"
	// clusterName keeps the suite's cluster apart from the demo's and the benchmark's.
	clusterName = "teardown-e2e"
)

var (
	root       = filepath.Join("..", "..")
	k8s        client.Client
	probe      framework.Probe
	kubeconfig string
	operator   *exec.Cmd
	opLog      framework.SyncBuffer
	// operatorBin and pluginBin are the operator and kubectl-teardown, built once.
	operatorBin, pluginBin string
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "E2E Suite (kwok)")
}

var _ = BeforeSuite(func() {
	By("starting the kwok cluster")
	var err error
	kubeconfig, err = framework.StartCluster(root, clusterName)
	Expect(err).NotTo(HaveOccurred())
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	k8s, err = framework.Client(cfg)
	Expect(err).NotTo(HaveOccurred())
	probe = framework.Probe{Client: k8s}

	By("installing the CRDs")
	ctx := context.Background()
	Expect(framework.InstallCRDs(ctx, k8s, filepath.Join(root, "config", "crd", "bases"))).To(Succeed())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: runNamespace}}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, ns))).To(Succeed())
	// The admission policies of config/admission, as in any install: requests (delete-requested,
	// abandon, retry) count only while the one that checks them is in force, and the one on the
	// operator's marks admits the Job controller's pods of job steps' Jobs.
	Expect(framework.InstallAdmissionPolicies(ctx, k8s, root)).To(Succeed())
	Expect(framework.AwaitRequestsTrusted(ctx, k8s)).To(Succeed())

	By("building the operator and the kubectl plugin, and starting the operator")
	operatorBin = buildBinary("./cmd/teardown-operator")
	pluginBin = buildBinary("./cmd/kubectl-teardown")
	startOperator()
})

// asRequest is the value of a request annotation (delete-requested, abandon) that the suite's
// client sets: "<its user name>: <why>", as the admission policy that checks requests admits.
func asRequest(ctx context.Context, why string) string {
	GinkgoHelper()
	v, err := framework.Request(ctx, k8s, why)
	Expect(err).NotTo(HaveOccurred())
	return v
}

// buildBinary builds a command of the module into the suite's temporary directory.
func buildBinary(pkg string) string {
	bin := filepath.Join(GinkgoT().TempDir(), filepath.Base(pkg))
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = root
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	return bin
}

// startOperator runs the operator binary against the cluster.
func startOperator() {
	startOperatorWith(kubeconfig)
}

// startOperatorArgs runs the operator binary with flags added to the suite's.
func startOperatorArgs(extra ...string) {
	startOperatorWith(kubeconfig, extra...)
}

// operatorKubeconfig is the kubeconfig the running operator was started with.
var operatorKubeconfig string

// startOperatorWith runs the operator binary with the given kubeconfig.
func startOperatorWith(kubeconfig string, extra ...string) {
	operatorKubeconfig = kubeconfig
	operator = exec.Command(operatorBin, append([]string{"--kubeconfig", kubeconfig, "--run-namespace", runNamespace,
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0"}, extra...)...)
	operator.Stdout, operator.Stderr = &opLog, &opLog
	Expect(operator.Start()).To(Succeed())
}

// stopOperator stops the operator, as an uninstall would.
func stopOperator() {
	stopProcess(operator)
	operator = nil
}

var _ = AfterSuite(func() {
	stopOperator()
	if CurrentSpecReport().Failed() || os.Getenv("E2E_OPERATOR_LOG") != "" {
		GinkgoWriter.Println(opLog.String())
	}
	if os.Getenv("E2E_KEEP_CLUSTER") == "" {
		Expect(framework.StopCluster(root, clusterName)).To(Succeed())
	}
})

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		AddReportEntry("operator log", opLog.String())
	}
})

func newNamespace(ctx context.Context, name string) string {
	ns := fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%100000)
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	return ns
}
