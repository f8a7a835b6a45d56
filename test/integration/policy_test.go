package integration

import (
	"context"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

var _ = Describe("Policies", func() {
	ctx := context.Background()

	It("adds its finalizer to matching objects only, and removes it when they stop matching", func() {
		ns, other := newNamespace(ctx), newNamespace(ctx)
		p := namespacedPolicy(ns, "db", waitStep("pause", 0))
		p.Spec.Match = "object.data.k == 'v'"
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)

		match := configMap(ns, "match", map[string]string{"app": "db"})
		wrongLabel := configMap(ns, "wrong-label", map[string]string{"app": "web"})
		celMiss := configMap(ns, "cel-miss", map[string]string{"app": "db"})
		celMiss.Data["k"] = "other"
		elsewhere := configMap(other, "elsewhere", map[string]string{"app": "db"})
		for _, cm := range []*corev1.ConfigMap{match, wrongLabel, celMiss, elsewhere} {
			Expect(k8s.Create(ctx, cm)).To(Succeed())
		}
		Eventually(finalizers(ctx, match), 10*time.Second).Should(ConsistOf(finalizerOf(p)))
		Consistently(finalizers(ctx, wrongLabel), 2*time.Second).Should(BeEmpty())
		Expect(finalizers(ctx, celMiss)()).To(BeEmpty())
		Expect(finalizers(ctx, elsewhere)()).To(BeEmpty(), "a TeardownPolicy must not reach into another namespace")
		Eventually(func() int32 { _ = k8s.Get(ctx, client.ObjectKeyFromObject(p), p); return p.Status.Protected }, 10*time.Second).Should(Equal(int32(1)))
		Expect(p.Status.Finalizer).To(Equal(finalizerOf(p)))

		By("printing counts of 0 as 0, not blank, in kubectl get")
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("TeardownPolicy"))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), u)).To(Succeed())
		active, found, _ := unstructured.NestedInt64(u.Object, "status", "activeRuns")
		Expect(found).To(BeTrue(), "status.activeRuns must be written even when 0")
		Expect(active).To(BeZero())

		By("relabelling the object out of the selector")
		update(ctx, match, func(cm *corev1.ConfigMap) { cm.Labels["app"] = "web" })
		Eventually(finalizers(ctx, match), 10*time.Second).Should(BeEmpty())
	})

	It("reports an invalid CEL expression naming the field, and adds no finalizer", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "bad", waitStep("first", 0), v1alpha1.Step{Name: "second", When: "object.metadata.name ==", Wait: &v1alpha1.WaitStep{Duration: dur(0)}})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cond := expectReady(ctx, p, metav1.ConditionFalse)
		Expect(cond.Reason).To(Equal(v1alpha1.ReasonInvalidSpec))
		Expect(cond.Message).To(ContainSubstring("spec.steps[1].when"))
		cm := configMap(ns, "x", map[string]string{"app": "bad"})
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Consistently(finalizers(ctx, cm), 2*time.Second).Should(BeEmpty())

		By("fixing the expression")
		update(ctx, p, func(p *v1alpha1.TeardownPolicy) { p.Spec.Steps[1].When = "object.metadata.name == 'x'" })
		expectReady(ctx, p, metav1.ConditionTrue)
		Eventually(finalizers(ctx, cm), 10*time.Second).Should(ConsistOf(finalizerOf(p)))
	})

	It("rejects structurally invalid policies at admission with the field named", func() {
		ns := newNamespace(ctx)
		twoKinds := namespacedPolicy(ns, "nokind", v1alpha1.Step{Name: "empty"})
		err := k8s.Create(ctx, twoKinds)
		Expect(err).To(MatchError(ContainSubstring("set exactly one step kind")))

		dup := namespacedPolicy(ns, "dup", waitStep("a", 0), waitStep("a", 0))
		Expect(k8s.Create(ctx, dup)).To(MatchError(ContainSubstring("spec.steps[1]: Duplicate value")))

		badDur := namespacedPolicy(ns, "baddur", waitStep("a", 0))
		raw, _ := yaml.Marshal(badDur)
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal(raw, &u.Object)).To(Succeed())
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("TeardownPolicy"))
		Expect(unstructured.SetNestedField(u.Object, "ten minutes", "spec", "steps", "0")).NotTo(Succeed()) // steps is a list
		steps, _, _ := unstructured.NestedSlice(u.Object, "spec", "steps")
		steps[0].(map[string]any)["wait"] = map[string]any{"duration": "ten minutes"}
		Expect(unstructured.SetNestedSlice(u.Object, steps, "spec", "steps")).To(Succeed())
		Expect(k8s.Create(ctx, u)).To(MatchError(ContainSubstring("spec.steps[0].wait.duration")))

		steps[0].(map[string]any)["wait"] = map[string]any{"duration": "3000000h"}
		Expect(unstructured.SetNestedSlice(u.Object, steps, "spec", "steps")).To(Succeed())
		Expect(k8s.Create(ctx, u)).To(MatchError(ContainSubstring("must be at most 8760h")), "a duration Go cannot parse must not reach the informer")

		immutable := namespacedPolicy(ns, "immutable", waitStep("a", 0))
		Expect(k8s.Create(ctx, immutable)).To(Succeed())
		changed := immutable.DeepCopy()
		changed.Spec.TargetRef.Kind = "Secret"
		Expect(k8s.Patch(ctx, changed, client.MergeFrom(immutable))).To(MatchError(ContainSubstring("targetRef is immutable")))

		own := namespacedPolicy(ns, "own", waitStep("a", 0))
		own.Spec.TargetRef = v1alpha1.TargetReference{APIVersion: "teardown.dev/v1alpha1", Kind: "TeardownRun"}
		Expect(k8s.Create(ctx, own)).To(MatchError(ContainSubstring("teardown.dev resources cannot be targets")))
	})

	It("waits for a target kind that is not served, and recovers once its CRD is installed", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "widgets", waitStep("a", 0))
		p.Spec.TargetRef = v1alpha1.TargetReference{APIVersion: "example.teardown.dev/v1", Kind: "Widget"}
		p.Spec.Selector = nil
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cond := expectReady(ctx, p, metav1.ConditionFalse)
		Expect(cond.Reason).To(Equal(v1alpha1.ReasonKindNotServed))
		Expect(cond.Message).To(ContainSubstring("Widget"))

		raw, err := os.ReadFile("testdata/widget-crd.yaml")
		Expect(err).NotTo(HaveOccurred())
		crd := &apiextensionsv1.CustomResourceDefinition{}
		Expect(yaml.Unmarshal(raw, crd)).To(Succeed())
		Expect(framework.InstallCRD(ctx, k8s, crd)).To(Succeed())

		expectReady(ctx, p, metav1.ConditionTrue)
		w := &unstructured.Unstructured{}
		w.SetAPIVersion("example.teardown.dev/v1")
		w.SetKind("Widget")
		w.SetNamespace(ns)
		w.SetName("w1")
		Expect(k8s.Create(ctx, w)).To(Succeed())
		Eventually(finalizers(ctx, w), 10*time.Second).Should(ConsistOf(finalizerOf(p)))
		Expect(k8s.Delete(ctx, w)).To(Succeed())
		Eventually(gone(ctx, w), 10*time.Second).Should(BeTrue())
	})

	// Issue: with its CRD removed, a policy stayed Ready/Protecting and, once deleted, kept its
	// own finalizer for ever (its live recount was answered NotFound).
	It("says when its target kind's CRD is removed, and can then be deleted", func() {
		ns := newNamespace(ctx)
		raw, err := os.ReadFile("testdata/widget-crd.yaml")
		Expect(err).NotTo(HaveOccurred())
		crd := &apiextensionsv1.CustomResourceDefinition{}
		Expect(yaml.Unmarshal(raw, crd)).To(Succeed())
		// The same schema under a group of this spec's own, so that removing it touches no other spec.
		crd.Name, crd.Spec.Group = "widgets.removed.teardown.dev", "removed.teardown.dev"
		Expect(framework.InstallCRD(ctx, k8s, crd)).To(Succeed())
		p := namespacedPolicy(ns, "widgets", waitStep("a", 0))
		p.Spec.TargetRef = v1alpha1.TargetReference{APIVersion: "removed.teardown.dev/v1", Kind: "Widget"}
		p.Spec.Selector = nil
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		w := &unstructured.Unstructured{}
		w.SetAPIVersion("removed.teardown.dev/v1")
		w.SetKind("Widget")
		w.SetNamespace(ns)
		w.SetName("w1")
		Expect(k8s.Create(ctx, w)).To(Succeed())
		Eventually(finalizers(ctx, w), 10*time.Second).Should(ConsistOf(finalizerOf(p)))

		By("the CRD goes: its objects are torn down first, then the policy says the kind is not served")
		Expect(k8s.Delete(ctx, crd)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(crd), &apiextensionsv1.CustomResourceDefinition{}))
		}, 30*time.Second).Should(BeTrue())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			cond := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(v1alpha1.ReasonKindNotServed))
			g.Expect(cond.Message).To(ContainSubstring("no longer served"))
		}, 30*time.Second).Should(Succeed())

		By("the policy can be deleted")
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(gone(ctx, p), 15*time.Second).Should(BeTrue())
	})

	It("refuses, from the cluster's discovery, a namespaced lookup of Nodes and a Job with no namespace for Namespaces", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "nodes", v1alpha1.Step{Name: "w", Wait: &v1alpha1.WaitStep{Until: "size(nodes) == 0",
			Lookups: []v1alpha1.Lookup{{Name: "nodes", APIVersion: "v1", Kind: "Node"}}}})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cond := expectReady(ctx, p, metav1.ConditionFalse)
		Expect(cond.Reason).To(Equal(v1alpha1.ReasonInvalidSpec))
		Expect(cond.Message).To(ContainSubstring("spec.steps[0].wait.lookups[0].kind: Forbidden: Node is cluster-scoped"))

		cp := &v1alpha1.ClusterTeardownPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ns-job-" + ns}, Spec: v1alpha1.ClusterTeardownPolicySpec{
			TeardownPolicySpec: v1alpha1.TeardownPolicySpec{
				TargetRef: v1alpha1.TargetReference{APIVersion: "v1", Kind: "Namespace"},
				Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"never": ns}},
				Pipeline: v1alpha1.Pipeline{Steps: []v1alpha1.Step{{Name: "dump", Job: &v1alpha1.JobStep{Template: v1alpha1.JobTemplate{
					Spec: runtime.RawExtension{Raw: []byte(`{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"busybox"}]}}}`)}}}}}},
			}}}
		Expect(k8s.Create(ctx, cp)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, cp))).To(Succeed()) })
		cond = expectReady(ctx, cp, metav1.ConditionFalse)
		Expect(cond.Message).To(ContainSubstring("spec.steps[0].job.namespace: Required value: Namespace is cluster-scoped"))
	})

	It("refuses a cluster-scoped kind in a namespaced policy", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "nodes", waitStep("a", 0))
		p.Spec.TargetRef = v1alpha1.TargetReference{APIVersion: "v1", Kind: "Namespace"}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cond := expectReady(ctx, p, metav1.ConditionFalse)
		Expect(cond.Reason).To(Equal(v1alpha1.ReasonInvalidTarget))
	})

	It("selects namespaces by label for a cluster policy, following label changes", func() {
		nsIn, nsOut := newNamespace(ctx), newNamespace(ctx)
		nsObj := &corev1.Namespace{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: nsIn}, nsObj)).To(Succeed())
		nsObj.Labels["teardown-test"] = "yes"
		Expect(k8s.Update(ctx, nsObj)).To(Succeed())

		cp := &v1alpha1.ClusterTeardownPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-" + nsIn},
			Spec: v1alpha1.ClusterTeardownPolicySpec{
				TeardownPolicySpec: v1alpha1.TeardownPolicySpec{
					TargetRef: v1alpha1.TargetReference{APIVersion: "v1", Kind: "ConfigMap"},
					Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"cluster-test": nsIn}},
					Pipeline:  v1alpha1.Pipeline{Steps: []v1alpha1.Step{waitStep("a", 0)}},
					// Where the run goes is what this spec checks at the end.
					RunHistory: v1alpha1.RunHistoryAll,
				},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"teardown-test": "yes"}},
			},
		}
		Expect(k8s.Create(ctx, cp)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(ctx, cp) })
		expectReady(ctx, cp, metav1.ConditionTrue)
		fin := "clusterteardownpolicy.teardown.dev/" + cp.Name
		in := configMap(nsIn, "in", map[string]string{"cluster-test": nsIn})
		out := configMap(nsOut, "out", map[string]string{"cluster-test": nsIn})
		Expect(k8s.Create(ctx, in)).To(Succeed())
		Expect(k8s.Create(ctx, out)).To(Succeed())
		Eventually(finalizers(ctx, in), 10*time.Second).Should(ConsistOf(fin))
		Consistently(finalizers(ctx, out), 2*time.Second).Should(BeEmpty())

		By("labelling the other namespace")
		nsObj = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsOut}}
		update(ctx, nsObj, func(n *corev1.Namespace) { n.Labels["teardown-test"] = "yes" })
		Eventually(finalizers(ctx, out), 10*time.Second).Should(ConsistOf(fin))

		By("deleting the target: the run of a cluster policy still lives in the target's namespace")
		Expect(k8s.Delete(ctx, in)).To(Succeed())
		Eventually(gone(ctx, in), 10*time.Second).Should(BeTrue())
		Expect(runFor(ctx, in)().Namespace).To(Equal(nsIn))
	})
})
