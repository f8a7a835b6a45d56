package integration

import (
	"context"
	"fmt"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine"
	"github.com/teardown-dev/teardown-operator/engine/admission"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// armedAtCreation reports whether the API server adds finalizer to obj when it is created: a
// dry-run create goes through admission and stores nothing, and the operator never sees it.
func armedAtCreation(ctx context.Context, obj client.Object, finalizer string) func() bool {
	return func() bool {
		probe := obj.DeepCopyObject().(client.Object)
		probe.SetResourceVersion("")
		Expect(k8s.Create(ctx, probe, client.DryRunAll)).To(Succeed())
		for _, f := range probe.GetFinalizers() {
			if f == finalizer {
				return true
			}
		}
		return false
	}
}

// admissionObjects returns a function that says whether the admission policy and binding of
// the policy named ns/name (ns empty: a ClusterTeardownPolicy) exist.
func admissionObjectsExist(ctx context.Context, ns, name string) func() bool {
	return func() bool {
		n := naming.ArmingPolicyName(ns, name)
		errP := k8s.Get(ctx, client.ObjectKey{Name: n}, &admissionv1.MutatingAdmissionPolicy{})
		errB := k8s.Get(ctx, client.ObjectKey{Name: n}, &admissionv1.MutatingAdmissionPolicyBinding{})
		for _, err := range []error{errP, errB} {
			if err != nil && !apierrors.IsNotFound(err) {
				Expect(err).NotTo(HaveOccurred())
			}
		}
		return errP == nil && errB == nil
	}
}

// protectedFromCreation returns the policy's ProtectedFromCreation condition, for its generation.
func protectedFromCreation(ctx context.Context, obj client.Object) func() *metav1.Condition {
	return func() *metav1.Condition {
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		var conds []metav1.Condition
		switch p := obj.(type) {
		case *v1alpha1.TeardownPolicy:
			conds = p.Status.Conditions
		case *v1alpha1.ClusterTeardownPolicy:
			conds = p.Status.Conditions
		}
		c := meta.FindStatusCondition(conds, v1alpha1.ConditionProtectedFromCreation)
		if c == nil || c.ObservedGeneration != obj.GetGeneration() {
			return nil
		}
		return c
	}
}

func conditionReason(c *metav1.Condition) string {
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason
}

// policyMetric scrapes one of the operator's series of a policy (gauge or counter); -1 when absent.
func policyMetric(name string, p client.Object) func() float64 {
	label := p.GetObjectKind().GroupVersionKind().Kind
	switch p.(type) {
	case *v1alpha1.TeardownPolicy:
		label = "TeardownPolicy/" + p.GetNamespace() + "/" + p.GetName()
	case *v1alpha1.ClusterTeardownPolicy:
		label = "ClusterTeardownPolicy/" + p.GetName()
	}
	return func() float64 {
		families, err := scrapeMetrics()
		Expect(err).NotTo(HaveOccurred())
		for _, m := range families[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() == label {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
}

var _ = Describe("Born protected", func() {
	ctx := context.Background()

	It("arms matching objects at creation while the operator is stopped; their pipelines run once it is back", func() {
		ns, other := newNamespace(ctx), newNamespace(ctx)
		p := namespacedPolicy(ns, "born", waitStep("noop", 0))
		p.Spec.Match = "has(object.data) && object.data.size == 'big'"
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		Eventually(protectedFromCreation(ctx, p), 10*time.Second).Should(WithTransform(conditionReason, Equal("True/"+v1alpha1.ReasonArmedAtAdmission)))
		var mp admissionv1.MutatingAdmissionPolicy
		Expect(k8s.Get(ctx, client.ObjectKey{Name: naming.ArmingPolicyName(ns, p.Name)}, &mp)).To(Succeed())
		Expect(mp.Labels).To(HaveKeyWithValue(v1alpha1.LabelPolicyUID, string(p.UID)))
		Expect(mp.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationPolicy, "TeardownPolicy/"+ns+"/born"))
		Expect(*mp.Spec.FailurePolicy).To(Equal(admissionv1.Ignore))
		// The API server loads admission policies from a watch of its own: moments after they
		// are written.
		probe := configMap(ns, "probe", map[string]string{"app": p.Name})
		probe.Data = map[string]string{"size": "big"}
		Eventually(armedAtCreation(ctx, probe, finalizerOf(p)), 10*time.Second).Should(BeTrue())

		stopOperator()
		stopped := true
		DeferCleanup(func() {
			if stopped {
				stopOperator = startOperator()
			}
		})
		big := configMap(ns, "big", map[string]string{"app": p.Name})
		big.Data = map[string]string{"size": "big"}
		Expect(k8s.Create(ctx, big)).To(Succeed())
		Expect(big.Finalizers).To(ConsistOf(finalizerOf(p)), "the create's answer carries the finalizer")
		small := configMap(ns, "small", map[string]string{"app": p.Name})
		small.Data = map[string]string{"size": "small"}
		unlabelled := configMap(ns, "unlabelled", map[string]string{"app": "other"})
		unlabelled.Data = map[string]string{"size": "big"}
		elsewhere := configMap(other, "elsewhere", map[string]string{"app": p.Name})
		elsewhere.Data = map[string]string{"size": "big"}
		for _, cm := range []*corev1.ConfigMap{small, unlabelled, elsewhere} {
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			Expect(cm.Finalizers).To(BeEmpty(), "%s: match false, another label or another namespace", cm.Name)
		}

		By("deleted while the operator is stopped, the armed object waits")
		Expect(k8s.Delete(ctx, big)).To(Succeed())
		Consistently(func() bool { return gone(ctx, big)() }, 2*time.Second).Should(BeFalse())

		By("the operator back, its pipeline runs and it goes")
		stopOperator, stopped = startOperator(), false
		Eventually(gone(ctx, big), 20*time.Second).Should(BeTrue())
		Eventually(teardownOf(ctx, p, big), 10*time.Second).ShouldNot(BeNil())
		written := mp.ResourceVersion
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&mp), &mp)).To(Succeed())
		Expect(mp.ResourceVersion).To(Equal(written), "the restarted operator found its admission policy as it wants it, and wrote nothing")
		Eventually(policyMetric("teardown_unarmed_objects", p), 10*time.Second).Should(BeEquivalentTo(0), "the other objects are not selected")
		Expect(policyMetric("teardown_objects_armed_by_operator_total", p)()).To(BeNumerically("<=", 0), "the operator armed nothing itself")
	})

	It("lets a create through unarmed when the match fails at admission, and counts the object as unarmed", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "failing-match", waitStep("noop", 0))
		p.Spec.Match = "object.data.tier == 'db'" // an error on an object without data
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		db := configMap(ns, "db", map[string]string{"app": p.Name})
		db.Data = map[string]string{"tier": "db"}
		Eventually(armedAtCreation(ctx, db, finalizerOf(p)), 10*time.Second).Should(BeTrue())
		empty := configMap(ns, "empty", map[string]string{"app": p.Name})
		Expect(k8s.Create(ctx, empty)).To(Succeed(), "failurePolicy Ignore: the API server never refuses a create because of a policy")
		Expect(empty.Finalizers).To(BeEmpty())
		Eventually(policyMetric("teardown_match_errors", p), 10*time.Second).Should(BeEquivalentTo(1))
		Eventually(policyMetric("teardown_unarmed_objects", p), 10*time.Second).Should(BeEquivalentTo(1))
		By("data added, the operator arms it, and counts that it did")
		update(ctx, empty, func(c *corev1.ConfigMap) { c.Data = map[string]string{"tier": "db"} })
		Eventually(finalizers(ctx, empty), 10*time.Second).Should(ContainElement(finalizerOf(p)))
		Eventually(policyMetric("teardown_unarmed_objects", p), 10*time.Second).Should(BeEquivalentTo(0))
		Eventually(policyMetric("teardown_objects_armed_by_operator_total", p), 10*time.Second).Should(BeEquivalentTo(1))
	})

	It("follows the policy's edits, and removes its admission objects before it releases anything", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "edited", waitStep("noop", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		fin := finalizerOf(p)
		oldLabel := configMap(ns, "probe-old", map[string]string{"app": p.Name})
		newLabel := configMap(ns, "probe-new", map[string]string{"app": "renamed"})
		Eventually(armedAtCreation(ctx, oldLabel, fin), 10*time.Second).Should(BeTrue())
		Expect(armedAtCreation(ctx, newLabel, fin)()).To(BeFalse())

		By("a new selector arms what it selects at creation, and no longer what it left")
		update(ctx, p, func(p *v1alpha1.TeardownPolicy) { p.Spec.Selector.MatchLabels["app"] = "renamed" })
		Eventually(armedAtCreation(ctx, newLabel, fin), 10*time.Second).Should(BeTrue())
		Eventually(armedAtCreation(ctx, oldLabel, fin), 10*time.Second).Should(BeFalse())

		By("someone else's change to the admission policy is undone")
		name := naming.ArmingPolicyName(ns, p.Name)
		var mp admissionv1.MutatingAdmissionPolicy
		Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &mp)).To(Succeed())
		mp.Spec.MatchConditions = mp.Spec.MatchConditions[:0]
		mp.Spec.MatchConditions = append(mp.Spec.MatchConditions, admissionv1.MatchCondition{Name: "never", Expression: "false"})
		Expect(k8s.Update(ctx, &mp)).To(Succeed())
		Eventually(armedAtCreation(ctx, newLabel, fin), 10*time.Second).Should(BeTrue())

		By("deleted, the policy removes its admission objects before the finalizer leaves its objects")
		armed := configMap(ns, "armed", map[string]string{"app": "renamed"})
		Expect(k8s.Create(ctx, armed)).To(Succeed())
		Expect(armed.Finalizers).To(ContainElement(fin))
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(func(g Gomega) {
			present := admissionObjectsExist(ctx, ns, p.Name)()
			released := len(finalizers(ctx, armed)()) == 0
			Expect(present && released).To(BeFalse(), "the object was released while the admission policy could still arm objects")
			g.Expect(released).To(BeTrue())
		}, 20*time.Second, 20*time.Millisecond).Should(Succeed())
		Expect(admissionObjectsExist(ctx, ns, p.Name)()).To(BeFalse())
		Eventually(gone(ctx, p), 10*time.Second).Should(BeTrue())
	})

	It("a ClusterTeardownPolicy owns its admission objects and arms only the namespaces it selects", func() {
		ns, other := newNamespace(ctx), newNamespace(ctx)
		p := framework.ClusterPolicy("born-cluster", "born-cluster", ns, waitStep("noop", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, p))).To(Succeed()) })
		expectReady(ctx, p, metav1.ConditionTrue)
		fin := "clusterteardownpolicy.teardown.dev/" + p.Name
		Eventually(armedAtCreation(ctx, configMap(ns, "a", map[string]string{"app": p.Name}), fin), 10*time.Second).Should(BeTrue())
		Expect(armedAtCreation(ctx, configMap(other, "a", map[string]string{"app": p.Name}), fin)()).To(BeFalse())
		var mp admissionv1.MutatingAdmissionPolicy
		Expect(k8s.Get(ctx, client.ObjectKey{Name: naming.ArmingPolicyName("", p.Name)}, &mp)).To(Succeed())
		Expect(mp.OwnerReferences).To(ConsistOf(HaveField("UID", p.UID)))
	})

	It("a match the API server cannot evaluate leaves arming to the operator, and says so", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "not-admissible", waitStep("noop", 0))
		p.Spec.Match = "math.greatest(1, 2) == 2"
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		Eventually(protectedFromCreation(ctx, p), 10*time.Second).Should(WithTransform(conditionReason, Equal("False/"+v1alpha1.ReasonMatchNotAdmissible)))
		Expect(protectedFromCreation(ctx, p)().Message).To(ContainSubstring("math"))
		Expect(admissionObjectsExist(ctx, ns, p.Name)()).To(BeFalse())
		cm := configMap(ns, "armed-later", map[string]string{"app": p.Name})
		Expect(armedAtCreation(ctx, cm, finalizerOf(p))()).To(BeFalse())
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(p)))

		By("edited to a match that can run at admission, it arms at creation")
		update(ctx, p, func(p *v1alpha1.TeardownPolicy) { p.Spec.Match = "object.metadata.name != ''" })
		Eventually(protectedFromCreation(ctx, p), 10*time.Second).Should(WithTransform(conditionReason, Equal("True/"+v1alpha1.ReasonArmedAtAdmission)))
	})

	It("removes an admission object whose policy is gone, and all of them with --admission-arming=false", func() {
		ns := newNamespace(ctx)
		stray, strayBinding := admission.Build(admission.Spec{PolicyKind: "TeardownPolicy", PolicyNamespace: ns, PolicyName: "never-existed",
			PolicyUID: "no-such-uid", Finalizer: "teardownpolicy.teardown.dev/never-existed", Resource: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true})
		Expect(k8s.Create(ctx, stray)).To(Succeed())
		Expect(k8s.Create(ctx, strayBinding)).To(Succeed())
		Eventually(admissionObjectsExist(ctx, ns, "never-existed"), 10*time.Second).Should(BeFalse())

		p := namespacedPolicy(ns, "disabled", waitStep("noop", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(admissionObjectsExist(ctx, ns, p.Name), 10*time.Second).Should(BeTrue())
		restartOperatorWith(func(o *engine.Options) { o.DisableAdmissionArming = true })
		Eventually(protectedFromCreation(ctx, p), 10*time.Second).Should(WithTransform(conditionReason, Equal("False/"+v1alpha1.ReasonAdmissionDisabled)))
		Eventually(admissionObjectsExist(ctx, ns, p.Name), 10*time.Second).Should(BeFalse())
		cm := configMap(ns, "armed-by-operator", map[string]string{"app": p.Name})
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(p)))
	})

	It("never lets a create be refused while a new CRD's schema is unknown to the API server's admission", func() {
		ns := newNamespace(ctx)
		raw, err := os.ReadFile("testdata/widget-crd.yaml")
		Expect(err).NotTo(HaveOccurred())
		crd := &apiextensionsv1.CustomResourceDefinition{}
		Expect(yaml.Unmarshal(raw, crd)).To(Succeed())
		crd.Name, crd.Spec.Group = "widgets.born.teardown.dev", "born.teardown.dev"
		p := namespacedPolicy(ns, "new-kind", waitStep("noop", 0))
		p.Spec.TargetRef = v1alpha1.TargetReference{APIVersion: "born.teardown.dev/v1", Kind: "Widget"}
		p.Spec.Selector = nil

		By("the CRD and the policy applied together, objects created at once and for the next seconds: every create succeeds")
		Expect(framework.InstallCRD(ctx, k8s, crd)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, crd))).To(Succeed()) })
		Expect(k8s.Create(ctx, p)).To(Succeed())
		widget := func(i int) *unstructured.Unstructured {
			w := &unstructured.Unstructured{}
			w.SetAPIVersion("born.teardown.dev/v1")
			w.SetKind("Widget")
			w.SetNamespace(ns)
			w.SetName(fmt.Sprintf("w%03d", i))
			return w
		}
		pending := false
		var armedAt int
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			w := widget(i)
			Expect(k8s.Create(ctx, w)).To(Succeed(), "create %d, %s after the CRD", i, time.Since(deadline.Add(-30*time.Second)))
			if c := protectedFromCreation(ctx, p)(); c != nil && c.Reason == v1alpha1.ReasonArmingPending {
				pending = true
			}
			if len(w.GetFinalizers()) > 0 {
				armedAt = i
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		Expect(armedAt).To(BeNumerically(">", 0), "objects come to be armed at creation")
		Expect(pending).To(BeTrue(), "the policy said it waited for the kind's schema")
		Eventually(protectedFromCreation(ctx, p), 10*time.Second).Should(WithTransform(conditionReason, Equal("True/"+v1alpha1.ReasonArmedAtAdmission)))
		for i := 0; i < armedAt; i++ {
			Eventually(finalizers(ctx, widget(i)), 10*time.Second).Should(ConsistOf(finalizerOf(p)), "the operator armed what was created meanwhile")
		}
	})

	It("keeps its admission policies as the ServiceAccount an install gives it, with the shipped ClusterRole", func() {
		restartOperatorAsServiceAccount(ctx)
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "as-installed", waitStep("noop", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		Eventually(protectedFromCreation(ctx, p), 10*time.Second).Should(WithTransform(conditionReason, Equal("True/"+v1alpha1.ReasonArmedAtAdmission)))
		Eventually(armedAtCreation(ctx, configMap(ns, "probe", map[string]string{"app": p.Name}), finalizerOf(p)), 10*time.Second).Should(BeTrue())
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(admissionObjectsExist(ctx, ns, p.Name), 10*time.Second).Should(BeFalse())
	})
})

var _ = Describe("Arming budget", func() {
	ctx := context.Background()

	It("keeps no more admission policies for one namespace, and for TeardownPolicies in all, than the budget; the policy past it still protects its objects", func() {
		// The total counts what earlier specs left armed too (once their clean-ups have settled):
		// three more places.
		armed := func() int {
			var list admissionv1.MutatingAdmissionPolicyList
			Expect(k8s.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelManagedBy: admission.ManagedBy, v1alpha1.LabelPolicyKind: "TeardownPolicy"})).To(Succeed())
			return len(list.Items)
		}
		before := armed()
		Consistently(armed, 2*time.Second).Should(Equal(before))
		total := before + 3
		restartOperatorWith(func(o *engine.Options) { o.ArmingBudget = engine.ArmingBudget{Total: total, PerNamespace: 2} })
		ns, other := newNamespace(ctx), newNamespace(ctx)
		var policies []*v1alpha1.TeardownPolicy
		for _, name := range []string{"first", "second", "third"} {
			p := namespacedPolicy(ns, name, waitStep("noop", 0))
			Expect(k8s.Create(ctx, p)).To(Succeed())
			expectReady(ctx, p, metav1.ConditionTrue)
			// One at a time, so that which one is past the budget is known.
			Eventually(protectedFromCreation(ctx, p), 10*time.Second).ShouldNot(BeNil())
			policies = append(policies, p)
		}
		for _, p := range policies[:2] {
			Expect(conditionReason(protectedFromCreation(ctx, p)())).To(Equal("True/" + v1alpha1.ReasonArmedAtAdmission))
		}
		past := protectedFromCreation(ctx, policies[2])()
		Expect(conditionReason(past)).To(Equal("False/" + v1alpha1.ReasonArmingBudget))
		Expect(past.Message).To(ContainSubstring("namespace " + ns + " already has 2 TeardownPolicies armed at admission, as many as --max-arming-policies-per-namespace allows"))
		Expect(k8s.Get(ctx, client.ObjectKey{Name: naming.ArmingPolicyName(ns, "third")}, &admissionv1.MutatingAdmissionPolicy{})).To(
			WithTransform(apierrors.IsNotFound, BeTrue()))

		By("its objects are still protected, armed by the operator")
		cm := configMap(ns, "orders", map[string]string{"app": "third"})
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(policies[2])))

		By("another namespace has a budget of its own, within the total")
		p := namespacedPolicy(other, "elsewhere", waitStep("noop", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(protectedFromCreation(ctx, p), 10*time.Second).Should(WithTransform(conditionReason, Equal("True/"+v1alpha1.ReasonArmedAtAdmission)))
		over := namespacedPolicy(other, "over", waitStep("noop", 0))
		Expect(k8s.Create(ctx, over)).To(Succeed())
		Eventually(protectedFromCreation(ctx, over), 10*time.Second).Should(And(WithTransform(conditionReason, Equal("False/"+v1alpha1.ReasonArmingBudget)),
			HaveField("Message", ContainSubstring(fmt.Sprintf("%d TeardownPolicies are already armed at admission, as many as --max-arming-policies allows", total)))))

		By("a ClusterTeardownPolicy is neither bounded nor counted")
		cp := framework.ClusterPolicy("budget-"+other, "budget", other, waitStep("noop", 0))
		Expect(k8s.Create(ctx, cp)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, cp))).To(Succeed()) })
		Eventually(protectedFromCreation(ctx, cp), 10*time.Second).Should(WithTransform(conditionReason, Equal("True/"+v1alpha1.ReasonArmedAtAdmission)))
	})
})
