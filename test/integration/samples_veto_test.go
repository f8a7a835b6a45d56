package integration

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

var _ = Describe("Sample network-veto", func() {
	BeforeEach(func(ctx SpecContext) {
		Expect(framework.InstallCRDs(ctx, k8s, exampleCRDs)).To(Succeed())
		installDeletionGuardPolicy(ctx)
	})

	It("refuses to delete a Network while Clusters use it, naming them, and lets it go once they are gone", networkVeto)
})

// exampleCluster returns a Cluster (samples/crds/cluster.yaml) in network, labelled as the sample's
// lookup selects.
func exampleCluster(ns, name, network string) *unstructured.Unstructured {
	c := exampleObject(ns, "Cluster", name, map[string]any{"network": network, "nodes": int64(3)})
	c.SetLabels(map[string]string{"example.teardown.dev/network": network})
	return c
}

// guardMessageOf reads the deletion guards' message an object carries, fresh from the API server
// ("" when it carries none).
func guardMessageOf(ctx context.Context, obj client.Object) func() string {
	return func() string {
		o := obj.DeepCopyObject().(client.Object)
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), o); err != nil {
			return ""
		}
		return o.GetAnnotations()[v1alpha1.AnnotationDeletionGuardMessage]
	}
}

func networkVeto(ctx SpecContext) {
	ns := newNamespace(ctx)
	p := createSample(ctx, samplePath("network-veto.yaml"), ns)[0].(*v1alpha1.TeardownPolicy)
	expectReady(ctx, p, metav1.ConditionTrue)

	network := exampleObject(ns, "Network", "prod", map[string]any{"cidr": "10.0.0.0/16"})
	staging := exampleObject(ns, "Network", "staging", nil)
	db, web := exampleCluster(ns, "db", "prod"), exampleCluster(ns, "web", "prod")
	elsewhere := exampleCluster(ns, "staging-web", "staging") // another network's: never counts for prod
	for _, o := range []*unstructured.Unstructured{network, staging, db, web, elsewhere} {
		Expect(k8s.Create(ctx, o)).To(Succeed())
	}
	Eventually(finalizers(ctx, network), 10*time.Second).Should(ContainElement(finalizerOf(p)))
	Expect(finalizers(ctx, db)()).To(BeEmpty(), "clusters are not targets")

	By("the Network carries the verdict, and the message names its two clusters")
	prefix := "refused by a teardown deletion guard: TeardownPolicy/" + ns + "/network-veto: "
	two := "network prod is used by 2 cluster(s): db, web"
	Eventually(func() map[string]string { return labelsOf(ctx, network) }, 10*time.Second).
		Should(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDeny))
	Eventually(guardMessageOf(ctx, network), 5*time.Second).Should(Equal("TeardownPolicy/" + ns + "/network-veto: " + two))

	By("a DELETE, a dry-run DELETE and a collection delete are refused with that message")
	// A dry run first: it deletes nothing while the API server loads the admission policy.
	Eventually(func() error { return k8s.Delete(ctx, network, client.DryRunAll) }, 10*time.Second).
		Should(MatchError(ContainSubstring(two)))
	networks := &unstructured.Unstructured{}
	networks.SetGroupVersionKind(network.GroupVersionKind())
	for what, del := range map[string]func() error{
		"delete":         func() error { return k8s.Delete(ctx, network) },
		"dry-run delete": func() error { return k8s.Delete(ctx, network, client.DryRunAll) },
		"collection delete": func() error {
			return k8s.DeleteAllOf(ctx, networks, client.InNamespace(ns), client.MatchingFields{"metadata.name": "prod"})
		},
	} {
		err := del()
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", what, err)
		Expect(err.Error()).To(ContainSubstring(prefix+two), what)
	}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(network), network)).To(Succeed())
	Expect(network.GetDeletionTimestamp()).To(BeNil(), "the Network is not being deleted")
	Expect(network.GetFinalizers()).To(ContainElement(finalizerOf(p)))

	By("one cluster goes: the message follows")
	Expect(k8s.Delete(ctx, db)).To(Succeed())
	one := "network prod is used by 1 cluster(s): web"
	Eventually(guardMessageOf(ctx, network), 5*time.Second).Should(Equal("TeardownPolicy/" + ns + "/network-veto: " + one))
	err := k8s.Delete(ctx, network, client.DryRunAll)
	Expect(err).To(MatchError(ContainSubstring(prefix + one)))

	By("the last cluster goes: the veto lifts within about a second")
	Expect(k8s.Delete(ctx, web)).To(Succeed())
	start := time.Now()
	Eventually(func() map[string]string { return labelsOf(ctx, network) }, 2*time.Second, 50*time.Millisecond).
		ShouldNot(HaveKey(v1alpha1.LabelDeletionGuard))
	AddReportEntry("network-veto lifted after", time.Since(start).String())
	Expect(guardMessageOf(ctx, network)()).To(BeEmpty())
	Expect(labelsOf(ctx, staging)).To(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDeny),
		"staging still has its cluster")

	By("the Network's delete is allowed, and its pipeline runs and releases it")
	Eventually(func() error { return k8s.Delete(ctx, network, client.DryRunAll) }, 5*time.Second).Should(Succeed())
	Expect(k8s.Delete(ctx, network)).To(Succeed())
	Eventually(gone(ctx, network), 10*time.Second).Should(BeTrue())
	Expect(runFor(ctx, network)()).To(BeNil(), "done at once: no run kept at the default runHistory")
	Eventually(teardownOf(ctx, p, network), 15*time.Second).Should(PointTo(MatchFields(IgnoreExtras, Fields{
		"Outcome": Equal(v1alpha1.RunSucceeded), "Message": Equal("all steps done")})))
	Expect(gone(ctx, staging)()).To(BeFalse())
	Expect(gone(ctx, elsewhere)()).To(BeFalse())
}
