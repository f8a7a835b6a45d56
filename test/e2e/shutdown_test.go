package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// Issue: every clean stop with leader election logged an error line ("leader election lost"),
// which alerting on error logs turns into a page at each rollout.
var _ = Describe("Operator shutdown", Serial, func() {
	It("releases its lease on a clean stop and logs no error doing so", func() {
		ctx := context.Background()
		// An operator of this spec's own, its log in a file, started once the suite's has stopped
		// and stopped only once it has started every controller: a stop in the middle of start-up
		// logs informers that did not sync, which is not what this spec is about.
		stopOperator()
		DeferCleanup(startOperator)
		logPath := filepath.Join(GinkgoT().TempDir(), "operator.log")
		logFile, err := os.Create(logPath)
		Expect(err).NotTo(HaveOccurred())
		defer logFile.Close()
		op := exec.Command(operatorBin, "--kubeconfig", kubeconfig, "--run-namespace", runNamespace,
			"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0")
		op.Stdout, op.Stderr = logFile, logFile
		Expect(op.Start()).To(Succeed())
		DeferCleanup(func() { stopProcess(op) })
		logged := func() string {
			raw, _ := os.ReadFile(logPath)
			return string(raw)
		}
		Eventually(logged, 60*time.Second, 200*time.Millisecond).Should(And(
			ContainSubstring(`"msg":"Successfully acquired lease"`),
			ContainSubstring(`"msg":"Starting workers","controller":"teardownrun"`),
			ContainSubstring(`"msg":"Starting workers","controller":"target"`),
			ContainSubstring(`"msg":"Starting workers","controller":"TeardownPolicy"`)))

		stopProcess(op)
		log := logged()
		i := strings.LastIndex(log, "Stopping and waiting for non leader election runnables")
		Expect(i).To(BeNumerically(">=", 0), "the operator logged its stop")
		stop := log[i:]
		// controller-runtime reports the released lease as "leader election lost" only when its
		// stop sequence is still draining errors then (a race): when it does, it must be logged as
		// the release it is, never as an error.
		Expect(stop).NotTo(ContainSubstring(`"level":"error"`))
		lease := &coordinationv1.Lease{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: runNamespace, Name: v1alpha1.LeaderElectionLease}, lease)).To(Succeed())
		Expect(lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "").To(BeTrue(), "the lease is released, not left to expire")
	})
})
