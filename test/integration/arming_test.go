package integration

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// reconciles returns how many reconciles the operator's controller of that name has made, read
// from its metrics endpoint as Prometheus would.
func reconciles(controller string) float64 {
	GinkgoHelper()
	families, err := scrapeMetrics()
	Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, m := range families["controller_runtime_reconcile_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "controller" && l.GetValue() == controller {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

var _ = Describe("Arming", func() {
	ctx := context.Background()

	It("reconciles a new object once, not again for its own finalizer write, and still follows later changes", func() {
		const n = 40
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "armed", waitStep("noop", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		// The count is the controller's, across the cluster: wait until other specs' policies that
		// look at every event of a ConfigMap (a guard, a two-phase trigger) are gone and their
		// teardowns have settled, so that only this spec's objects are reconciled.
		Eventually(func(g Gomega) {
			var cluster v1alpha1.ClusterTeardownPolicyList
			g.Expect(k8s.List(ctx, &cluster)).To(Succeed())
			for _, c := range cluster.Items {
				g.Expect(c.Spec.DeletionGuard == nil && c.Spec.Trigger != v1alpha1.TriggerDeleteRequest).To(BeTrue(),
					"ClusterTeardownPolicy %s has a guard or a two-phase trigger", c.Name)
			}
			at := reconciles("target")
			time.Sleep(time.Second)
			g.Expect(reconciles("target")).To(Equal(at), "the target controller is busy with other specs' objects")
		}, time.Minute, time.Second).Should(Succeed())
		before := reconciles("target")
		var objs []*corev1.ConfigMap
		for i := range n {
			cm := configMap(ns, fmt.Sprintf("obj-%02d", i), map[string]string{"app": p.Name})
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			objs = append(objs, cm)
		}
		for _, cm := range objs {
			Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(p)))
		}
		time.Sleep(2 * time.Second) // the finalizer writes' own events have come by now
		// Each create is one reconcile; each arming write's event would be another.
		made := reconciles("target") - before
		AddReportEntry("arming reconciles", fmt.Sprintf("%.0f reconciles for %d new objects", made, n))
		Expect(made).To(BeNumerically("<", 1.5*n))

		By("a later change is followed: out of the selector, the finalizer goes; back in, it comes back")
		cm := objs[0]
		update(ctx, cm, func(c *corev1.ConfigMap) { c.Labels["app"] = "other" })
		Eventually(finalizers(ctx, cm), 10*time.Second).ShouldNot(ContainElement(finalizerOf(p)))
		update(ctx, cm, func(c *corev1.ConfigMap) { c.Labels["app"] = p.Name })
		Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(p)))
	})
})
