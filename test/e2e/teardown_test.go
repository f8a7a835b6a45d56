package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

var _ = Describe("Teardown on a real control plane", func() {
	ctx := context.Background()

	It("runs every pipeline when a namespace holding 50 protected objects is deleted, then the namespace goes", func() {
		const n = 50
		ns := newNamespace(ctx, "doomed")
		// The policy lives in the namespace being deleted: the hard case, since it is deleted too.
		p := framework.NamespacedPolicy(ns, "cleanup", framework.WaitStep("drain", 3*time.Second), framework.WaitStep("snapshot", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		for i := range n {
			cm := framework.ConfigMap(ns, fmt.Sprintf("db-%02d", i), map[string]string{"app": "cleanup"})
			Expect(k8s.Create(ctx, cm)).To(Succeed())
		}
		Eventually(func() int32 {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(p), p)
			return p.Status.Protected
		}, 60*time.Second, 500*time.Millisecond).Should(Equal(int32(n)))

		By("starting one teardown before the namespace is deleted, so its run lives in the namespace")
		early := framework.ConfigMap(ns, "early", map[string]string{"app": "cleanup"})
		Expect(k8s.Create(ctx, early)).To(Succeed())
		Eventually(probe.Finalizers(ctx, early), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/cleanup"))
		Expect(k8s.Delete(ctx, early)).To(Succeed())
		Eventually(probe.RunFor(ctx, early), 30*time.Second).ShouldNot(BeNil())
		Expect(probe.RunFor(ctx, early)().Namespace).To(Equal(ns))
		Expect(probe.RunPhase(ctx, early)()).NotTo(Equal(v1alpha1.RunSucceeded), "the namespace must be deleted while this run is in flight")

		By("deleting the namespace")
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Eventually(probe.Gone(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}), 3*time.Minute, time.Second).Should(BeTrue())

		var runs v1alpha1.TeardownRunList
		Expect(k8s.List(ctx, &runs, client.InNamespace(runNamespace), client.MatchingLabels{v1alpha1.LabelTargetNamespace: ns})).To(Succeed())
		byTarget := map[string][]string{}
		for _, r := range runs.Items {
			byTarget[r.Spec.Target.Name] = append(byTarget[r.Spec.Target.Name], fmt.Sprintf("%s(%s: %s)", r.Name, r.Status.Phase, r.Status.Message))
		}
		for name, rs := range byTarget {
			Expect(rs).To(HaveLen(1), "target %s has several runs", name)
		}
		Expect(runs.Items).To(HaveLen(n), "every target's run, recorded in the run namespace")
		// The early run lived in the deleted namespace; its own finalizer kept it until it finished.
		for _, r := range runs.Items {
			Expect(r.Status.Phase).To(Equal(v1alpha1.RunSucceeded), "run %s: %s", r.Name, r.Status.Message)
			Expect(r.Status.Step("drain").Phase).To(Equal(v1alpha1.StepSucceeded))
			Expect(r.Status.Step("snapshot").Phase).To(Equal(v1alpha1.StepSucceeded))
			Expect(r.Finalizers).NotTo(ContainElement(v1alpha1.FinalizerRun))
		}
	})

	It("at the default runHistory, keeps a run of each slow teardown of a namespace being deleted, and none of the instant ones", func() {
		ns := newNamespace(ctx, "doomed-quiet")
		quick := framework.NamespacedPolicy(ns, "quick", framework.WaitStep("now", 0))
		slow := framework.NamespacedPolicy(ns, "slow", framework.WaitStep("drain", 2*time.Second))
		for _, p := range []*v1alpha1.TeardownPolicy{quick, slow} {
			Expect(k8s.Create(ctx, p)).To(Succeed())
		}
		var targets []*corev1.ConfigMap
		for i := range 20 {
			app := map[bool]string{true: "quick", false: "slow"}[i%2 == 0]
			cm := framework.ConfigMap(ns, fmt.Sprintf("%s-%02d", app, i), map[string]string{"app": app})
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			targets = append(targets, cm)
		}
		for _, cm := range targets {
			Eventually(probe.Finalizers(ctx, cm), 30*time.Second).Should(HaveLen(1))
		}

		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Eventually(probe.Gone(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}), 2*time.Minute, time.Second).Should(BeTrue())

		var runs v1alpha1.TeardownRunList
		Expect(k8s.List(ctx, &runs, client.InNamespace(runNamespace), client.MatchingLabels{v1alpha1.LabelTargetNamespace: ns})).To(Succeed())
		recorded := map[string]int{}
		for _, r := range runs.Items {
			recorded[r.Spec.Target.Name]++
			Expect(r.Spec.PolicyRef.Name).To(Equal("slow"), "an instant teardown leaves no run: %s", r.Name)
			Expect(r.Status.Phase).To(Equal(v1alpha1.RunSucceeded), "run %s: %s", r.Name, r.Status.Message)
			var snapshot corev1.ConfigMap
			Expect(json.Unmarshal(r.Spec.Object.Raw, &snapshot)).To(Succeed(), "run %s has its object's snapshot", r.Name)
			Expect(snapshot.Name).To(Equal(r.Spec.Target.Name))
			Expect(snapshot.Data).To(HaveKeyWithValue("k", "v"))
		}
		Expect(recorded).To(HaveLen(10), "every slow teardown recorded")
		for name, n := range recorded {
			Expect(n).To(Equal(1), "target %s has %d runs", name, n)
		}
	})

	// Issue: the operator's log sampling dropped most "teardown ended" lines in a mass deletion
	// (119 of 300), the one record of a teardown that leaves no run.
	It("logs one audit line for every teardown of a namespace of 300 objects deleted at once, none kept as a run", func() {
		const n = 300
		ns := newNamespace(ctx, "audited")
		p := framework.NamespacedPolicy(ns, "instant", framework.WaitStep("now", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		uids := map[string]bool{}
		for i := range n {
			cm := framework.ConfigMap(ns, fmt.Sprintf("obj-%03d", i), map[string]string{"app": "instant"})
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			uids[string(cm.UID)] = true
		}
		Eventually(func() int32 {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(p), p)
			return p.Status.Protected
		}, 60*time.Second, 500*time.Millisecond).Should(Equal(int32(n)))
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Eventually(probe.Gone(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}), 3*time.Minute, time.Second).Should(BeTrue())

		var runs v1alpha1.TeardownRunList
		Expect(k8s.List(ctx, &runs, client.MatchingLabels{v1alpha1.LabelTargetNamespace: ns})).To(Succeed())
		Expect(runs.Items).To(BeEmpty(), "a teardown done at once leaves no run at the default runHistory")
		logged := map[string]bool{}
		for _, line := range strings.Split(opLog.String(), "\n") {
			var entry struct {
				Msg, Phase, Run, Policy, TargetUID string
				Steps                              []struct{ Name, Phase string }
			}
			if json.Unmarshal([]byte(line), &entry) != nil || entry.Msg != "teardown ended" || entry.Policy != "TeardownPolicy/"+ns+"/instant" {
				continue
			}
			Expect(entry.Phase).To(Equal("Succeeded"), line)
			Expect(entry.Run).To(BeEmpty(), line)
			Expect(entry.Steps).To(HaveLen(1), line)
			Expect(entry.Steps[0].Phase).To(Equal("Succeeded"), line)
			Expect(logged).NotTo(HaveKey(entry.TargetUID), "logged twice: %s", line)
			logged[entry.TargetUID] = true
		}
		Expect(logged).To(Equal(uids), "one audit line per teardown, none sampled away")
	})

	It("tears down an owner deleted with propagationPolicy Foreground after its dependents go", func() {
		ns := newNamespace(ctx, "foreground")
		p := framework.NamespacedPolicy(ns, "parent", v1alpha1.Step{
			Name: "children-gone",
			Wait: &v1alpha1.WaitStep{
				Until:    "size(children) == 0",
				Interval: framework.Dur(time.Hour),
				Lookups: []v1alpha1.Lookup{{Name: "children", APIVersion: "v1", Kind: "ConfigMap",
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"parent": "${object.metadata.name}"}}}},
			},
		})
		// The garbage collector may delete the child before the first pass looks: then the step
		// is done at once, and only runHistory All keeps the run this spec reads.
		p.Spec.RunHistory = v1alpha1.RunHistoryAll
		Expect(k8s.Create(ctx, p)).To(Succeed())
		parent := framework.ConfigMap(ns, "parent", map[string]string{"app": "parent"})
		Expect(k8s.Create(ctx, parent)).To(Succeed())
		Eventually(probe.Finalizers(ctx, parent), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/parent"))
		child := framework.ConfigMap(ns, "child", map[string]string{"parent": "parent"})
		child.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: parent.Name, UID: parent.UID, BlockOwnerDeletion: ptr.To(true)}}
		Expect(k8s.Create(ctx, child)).To(Succeed())

		Expect(k8s.Delete(ctx, parent, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
		Eventually(probe.Gone(ctx, child), time.Minute).Should(BeTrue(), "garbage collection deletes the dependent first")
		Eventually(probe.Gone(ctx, parent), time.Minute).Should(BeTrue())
		run := probe.RunFor(ctx, parent)()
		Expect(run).NotTo(BeNil())
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(run.Status.Step("children-gone").Message).To(ContainSubstring("condition met"))
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	})
})
