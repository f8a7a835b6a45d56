package e2e

import (
	"context"
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
		lease := &coordinationv1.Lease{}
		key := client.ObjectKey{Namespace: runNamespace, Name: v1alpha1.LeaderElectionLease}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, key, lease)).To(Succeed())
			g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
			g.Expect(*lease.Spec.HolderIdentity).NotTo(BeEmpty())
		}, 30*time.Second).Should(Succeed(), "the running operator holds its lease")

		stopOperator()
		DeferCleanup(startOperator)
		log := opLog.String()
		i := strings.LastIndex(log, "Stopping and waiting for non leader election runnables")
		Expect(i).To(BeNumerically(">=", 0), "the operator logged its stop")
		stop := log[i:]
		Expect(stop).To(ContainSubstring("released the leader election lease on shutdown"))
		Expect(stop).NotTo(ContainSubstring(`"level":"error"`))
		Expect(k8s.Get(ctx, key, lease)).To(Succeed())
		Expect(lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "").To(BeTrue(), "the lease is released, not left to expire")
	})
})
