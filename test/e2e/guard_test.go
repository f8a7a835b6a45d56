package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// On the kwok cluster the namespace controller is real: a namespace being deleted deletes its
// objects, and goes once they are gone.
var _ = Describe("Deletion guards on a real control plane", func() {
	ctx := context.Background()

	It("let a vetoed object go with its namespace by default, and hold the namespace with namespaceDeletion Deny", func() {
		Expect(framework.InstallAdmissionPolicies(ctx, k8s, root)).To(Succeed())
		guarded := func(ns string, nsDeletion v1alpha1.GuardNamespaceDeletion) *corev1.ConfigMap {
			p := framework.NamespacedPolicy(ns, "vetoed", framework.WaitStep("settle", 0))
			p.Spec.DeletionGuard = &v1alpha1.DeletionGuard{Deny: "!has(object.data.released)", Message: "${object.metadata.name} is not released",
				NamespaceDeletion: nsDeletion}
			Expect(k8s.Create(ctx, p)).To(Succeed())
			cm := framework.ConfigMap(ns, "db", map[string]string{"app": "vetoed"})
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			Eventually(func() error { return k8s.Delete(ctx, cm, client.DryRunAll) }, 30*time.Second).
				Should(MatchError(ContainSubstring("db is not released")))
			return cm
		}

		By("Allow: deleting the namespace deletes the object, through its pipeline, and the namespace goes")
		allowNS := newNamespace(ctx, "guard-allow")
		allowed := guarded(allowNS, "")
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: allowNS}}
		Expect(k8s.Delete(ctx, nsObj)).To(Succeed())
		Eventually(probe.Gone(ctx, nsObj), 2*time.Minute, time.Second).Should(BeTrue())
		Expect(probe.Gone(ctx, allowed)()).To(BeTrue())

		By("Deny: the namespace stays Terminating while the guard holds, and goes once it stops holding")
		denyNS := newNamespace(ctx, "guard-deny")
		held := guarded(denyNS, v1alpha1.GuardDenyNamespaceDeletion)
		nsObj = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: denyNS}}
		Expect(k8s.Delete(ctx, nsObj)).To(Succeed())
		Consistently(func() bool {
			cm := &corev1.ConfigMap{}
			return k8s.Get(ctx, client.ObjectKeyFromObject(held), cm) == nil && cm.DeletionTimestamp == nil
		}, 10*time.Second, time.Second).Should(BeTrue(), "the namespace controller's DELETE of the object is refused")
		Expect(probe.Gone(ctx, nsObj)()).To(BeFalse())
		patch := client.MergeFrom(held.DeepCopy())
		held.Data = map[string]string{"released": "yes"}
		Expect(k8s.Patch(ctx, held, patch)).To(Succeed())
		Eventually(probe.Gone(ctx, nsObj), 2*time.Minute, time.Second).Should(BeTrue())
	})
})
