package integration

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/cli"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// installDeletionGuardPolicy creates the admission policy shipped in config/admission, as an
// install would.
func installDeletionGuardPolicy(ctx context.Context) {
	GinkgoHelper()
	Expect(framework.InstallAdmissionPolicies(ctx, k8s, filepath.Join("..", ".."))).To(Succeed())
}

var _ = Describe("Deletion guards", func() {
	ctx := context.Background()

	It("refuse a DELETE while the guard holds, with its message, and allow it once a looked-up child goes", func() {
		installDeletionGuardPolicy(ctx)
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "network", waitStep("settle", 0))
		p.Spec.DeletionGuard = &v1alpha1.DeletionGuard{
			Deny:    "size(clusters) > 0",
			Message: "network ${object.metadata.name} still has ${size(clusters)} cluster(s)",
			Lookups: []v1alpha1.Lookup{{Name: "clusters", APIVersion: "v1", Kind: "ConfigMap",
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"network": "${object.metadata.name}"}}}},
		}
		child := configMap(ns, "cluster-a", map[string]string{"network": "prod"})
		Expect(k8s.Create(ctx, child)).To(Succeed())
		parent := protect(ctx, p, "prod")
		Eventually(func() map[string]string { return labelsOf(ctx, parent) }, 10*time.Second).
			Should(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDeny))

		By("a DELETE, a dry-run DELETE and a collection delete are refused, naming the guard")
		// A dry run first: it deletes nothing while the API server loads the admission policy.
		Eventually(func() error { return k8s.Delete(ctx, parent, client.DryRunAll) }, 10*time.Second).
			Should(MatchError(ContainSubstring("network prod still has 1 cluster(s)")))
		for _, del := range []func() error{
			func() error { return k8s.Delete(ctx, parent) },
			func() error { return k8s.Delete(ctx, parent, client.DryRunAll) },
			func() error {
				return k8s.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingLabels{"app": "network"})
			},
		} {
			err := del()
			Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring("network prod still has 1 cluster(s)"))
		}
		Expect(probe().Finalizers(ctx, parent)()).To(ContainElement(finalizerOf(p)))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(parent), parent)).To(Succeed())
		Expect(parent.DeletionTimestamp).To(BeNil(), "the object is not being deleted")

		By("kubectl teardown plan shows the guard's verdict now")
		cliKubeconfig = writeKubeconfig(cfg)
		stdout, stderr, code := kubectlTeardown("plan", "configmap/prod", "-n", ns)
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(ContainSubstring("deletion guard size(clusters) > 0: holds, a delete is refused: network prod still has 1 cluster(s)"))

		By("the child goes: the veto is lifted within about a second, and the delete runs the pipeline")
		Expect(k8s.Delete(ctx, child)).To(Succeed())
		start := time.Now()
		Eventually(func() map[string]string { return labelsOf(ctx, parent) }, 5*time.Second, 100*time.Millisecond).
			ShouldNot(HaveKey(v1alpha1.LabelDeletionGuard))
		AddReportEntry("veto lifted after", time.Since(start).String())
		stdout, _, _ = kubectlTeardown("plan", "configmap/prod", "-n", ns)
		Expect(stdout).To(ContainSubstring("deletion guard size(clusters) > 0: does not hold"))
		Expect(k8s.Delete(ctx, parent)).To(Succeed())
		Eventually(gone(ctx, parent), 10*time.Second).Should(BeTrue())
		Eventually(teardownOf(ctx, p, parent), 15*time.Second).Should(PointTo(MatchFields(IgnoreExtras, Fields{
			"Outcome": Equal(v1alpha1.RunSucceeded), "Run": BeEmpty()})), "done at once: no run kept, the policy's status records it")
	})
})

var _ = Describe("Deletion guards and namespace deletion", func() {
	ctx := context.Background()

	It("let the object go with its namespace (Allow, the default), or hold it then too (Deny)", func() {
		installDeletionGuardPolicy(ctx)
		ns := newNamespace(ctx)
		always := func(name string, nsDeletion v1alpha1.GuardNamespaceDeletion) *corev1.ConfigMap {
			p := namespacedPolicy(ns, name, waitStep("settle", 0))
			p.Spec.DeletionGuard = &v1alpha1.DeletionGuard{Deny: "true", Message: "${object.metadata.name} is held", NamespaceDeletion: nsDeletion}
			cm := protect(ctx, p, name+"-obj")
			Eventually(func() map[string]string { return labelsOf(ctx, cm) }, 10*time.Second).Should(HaveKey(v1alpha1.LabelDeletionGuard))
			Eventually(func() error { return k8s.Delete(ctx, cm, client.DryRunAll) }, 10*time.Second).
				Should(MatchError(ContainSubstring(name + "-obj is held")))
			return cm
		}
		allowed := always("allow", "")
		held := always("deny", v1alpha1.GuardDenyNamespaceDeletion)
		Expect(labelsOf(ctx, allowed)[v1alpha1.LabelDeletionGuard]).To(Equal(v1alpha1.GuardDeny))
		Expect(labelsOf(ctx, held)[v1alpha1.LabelDeletionGuard]).To(Equal(v1alpha1.GuardDenyAlways))

		By("the namespace is being deleted (envtest has no namespace controller: it stays Terminating)")
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Eventually(func() error { return k8s.Delete(ctx, allowed, client.DryRunAll) }, 10*time.Second).Should(Succeed())
		Expect(k8s.Delete(ctx, allowed)).To(Succeed())
		Eventually(gone(ctx, allowed), 10*time.Second).Should(BeTrue(), "its pipeline ran and released it")
		err := k8s.Delete(ctx, held)
		Expect(err).To(MatchError(ContainSubstring("deny-obj is held")))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(held), held)).To(Succeed())
		Expect(held.DeletionTimestamp).To(BeNil())
	})
})

var _ = Describe("Deletion guards after the operator is gone", func() {
	ctx := context.Background()

	It("are lifted by drain --all, so that nothing stays undeletable", Serial, func() {
		installDeletionGuardPolicy(ctx)
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "held", waitStep("settle", 0))
		p.Spec.DeletionGuard = &v1alpha1.DeletionGuard{Deny: "true", Message: "held"}
		cm := protect(ctx, p, "held-obj")
		Eventually(func() error { return k8s.Delete(ctx, cm, client.DryRunAll) }, 10*time.Second).Should(MatchError(ContainSubstring("held")))

		stopOperator()
		DeferCleanup(func() { stopOperator = startOperator() })
		out, errOut, code := kubectlTeardownAs(writeKubeconfig(cfg), "drain", "--all", "--yes")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("configmaps " + ns + "/held-obj"))
		Expect(out).To(MatchRegexp(`released \d+ finalizers? and \d+ deletion guard veto`))
		Expect(labelsOf(ctx, cm)).NotTo(HaveKey(v1alpha1.LabelDeletionGuard))
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
	})
})

// labelsOf reads an object's labels fresh from the API server.
func labelsOf(ctx context.Context, obj client.Object) map[string]string {
	o := obj.DeepCopyObject().(client.Object)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), o); err != nil {
		return nil
	}
	return o.GetLabels()
}

// annotationsOf reads an object's annotations fresh from the API server.
func annotationsOf(ctx context.Context, obj client.Object) map[string]string {
	o := obj.DeepCopyObject().(client.Object)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), o); err != nil {
		return nil
	}
	return o.GetAnnotations()
}

var _ = Describe("Deletion guards and the admission policy", func() {
	ctx := context.Background()

	It("report on the policy whether the admission policy that enforces them is installed", func() {
		installDeletionGuardPolicy(ctx)
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "guarded", waitStep("settle", 0))
		p.Spec.DeletionGuard = &v1alpha1.DeletionGuard{Deny: "true", Message: "never"}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		enforced := func() *metav1.Condition {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			return meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionVetoEnforced)
		}
		Eventually(enforced, 10*time.Second).Should(HaveField("Reason", v1alpha1.ReasonAdmissionInstalled))

		By("without the binding, the condition says nothing enforces the verdicts")
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AdmissionPolicyName}}
		Expect(k8s.Delete(ctx, binding)).To(Succeed())
		DeferCleanup(installDeletionGuardPolicy, ctx)
		Eventually(enforced, 10*time.Second).Should(And(HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", v1alpha1.ReasonAdmissionMissing), HaveField("Message", ContainSubstring("nothing refuses their deletion"))))
		installDeletionGuardPolicy(ctx)
		Eventually(enforced, 10*time.Second).Should(HaveField("Status", metav1.ConditionTrue))

		By("a policy without a guard or a two-phase trigger has no such condition")
		plain := namespacedPolicy(ns, "plain", waitStep("settle", 0))
		Expect(k8s.Create(ctx, plain)).To(Succeed())
		expectReady(ctx, plain, metav1.ConditionTrue)
		Expect(meta.FindStatusCondition(plain.Status.Conditions, v1alpha1.ConditionVetoEnforced)).To(BeNil())
	})
})
