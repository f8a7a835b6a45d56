package integration

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// protect creates a policy and a target it protects, and waits until the target carries the
// policy's finalizer.
func protect(ctx context.Context, p *v1alpha1.TeardownPolicy, name string) *corev1.ConfigMap {
	if p.ResourceVersion == "" {
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
	}
	cm := configMap(p.Namespace, name, map[string]string{"app": p.Name})
	Expect(k8s.Create(ctx, cm)).To(Succeed())
	Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(p)))
	return cm
}

var _ = Describe("Runs", func() {
	ctx := context.Background()

	It("runs the steps in order, then releases the target, and records it all", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "ordered", waitStep("first", 1*time.Second),
			v1alpha1.Step{Name: "skipped", When: "object.metadata.name == 'someone-else'", Wait: &v1alpha1.WaitStep{Duration: dur(time.Hour)}},
			v1alpha1.Step{Name: "guarded", When: "steps.first.phase == 'Succeeded' && object.data.k == 'v'", Wait: &v1alpha1.WaitStep{Duration: dur(time.Second)}},
			waitStep("instant", 0))
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())

		Eventually(stepPhase(ctx, cm, "first"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Expect(gone(ctx, cm)()).To(BeFalse(), "the target must stay while the pipeline runs")
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())

		run := runFor(ctx, cm)()
		Expect(run).NotTo(BeNil())
		Expect(run.Namespace).To(Equal(ns))
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(run.Spec.PolicyRef.Name).To(Equal(p.Name))
		Expect(run.Spec.Target.Name).To(Equal("target"))
		first, skipped, guarded := run.Status.Step("first"), run.Status.Step("skipped"), run.Status.Step("guarded")
		Expect(first.Phase).To(Equal(v1alpha1.StepSucceeded))
		Expect(skipped.Phase).To(Equal(v1alpha1.StepSkipped))
		Expect(guarded.Phase).To(Equal(v1alpha1.StepSucceeded))
		Expect(first.CompletionTime.Time.After(guarded.StartTime.Time)).To(BeFalse(), "steps must run in order")
		Expect(guarded.CompletionTime.Sub(first.StartTime.Time)).To(BeNumerically(">=", 2*time.Second-10*time.Millisecond))
		Expect(run.Status.CompletionTime).NotTo(BeNil())
		Eventually(func() []string { r := runFor(ctx, cm)(); return r.Finalizers }, 5*time.Second).ShouldNot(ContainElement(v1alpha1.FinalizerRun))

		Expect(run.Status.Step("instant").Phase).To(Equal(v1alpha1.StepSucceeded))

		By("events on the run: one per transition, and one for a step that starts and ends at once")
		notes := probe().EventNotes(ctx, run)
		Eventually(notes, 10*time.Second).Should(ContainElements(
			"StepStarted: Step first (wait) started",
			"StepSucceeded: Step first succeeded: waited 1s",
			ContainSubstring("StepSkipped: Step skipped skipped: when is false"),
			"StepStarted: Step guarded (wait) started",
			"StepSucceeded: Step instant succeeded: started and succeeded at once: waited 0s",
			ContainSubstring("TeardownSucceeded: "),
		))
		Expect(notes()).NotTo(ContainElement(ContainSubstring("Step instant (wait) started")))
	})

	It("records events on the target while it is being torn down", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "evented", waitStep("hold", time.Hour))
		cm := protect(ctx, p, "target")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(eventReasons(ctx, cm), 10*time.Second).Should(ContainElements(v1alpha1.ReasonRunCreated, v1alpha1.ReasonStepStarted))
		update(ctx, cm, func(c *corev1.ConfigMap) {
			c.Annotations = map[string]string{v1alpha1.AnnotationAbandon: asRequest("test cleanup")}
		})
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
	})

	It("fails a step at its timeout; onFailure Continue goes on, Fail stops; Retain keeps the target", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "timeouts",
			v1alpha1.Step{Name: "soft", Timeout: dur(time.Second), OnFailure: v1alpha1.OnFailureContinue, Wait: &v1alpha1.WaitStep{Duration: dur(time.Hour)}},
			v1alpha1.Step{Name: "hard", Timeout: dur(time.Second), Wait: &v1alpha1.WaitStep{Duration: dur(time.Hour)}},
			waitStep("never", 0))
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(runPhase(ctx, cm), 15*time.Second).Should(Equal(v1alpha1.RunFailed))
		run := runFor(ctx, cm)()
		Expect(run.Status.Step("soft").Phase).To(Equal(v1alpha1.StepFailed))
		Expect(run.Status.Step("soft").Message).To(ContainSubstring("timed out after 1s"))
		Expect(run.Status.Step("hard").Phase).To(Equal(v1alpha1.StepFailed))
		Expect(run.Status.Step("never").Phase).To(Equal(v1alpha1.StepSkipped))
		Consistently(gone(ctx, cm), 2*time.Second).Should(BeFalse(), "failurePolicy Retain keeps the target")
		Expect(eventReasons(ctx, run)()).To(ContainElement(v1alpha1.ReasonFailed))

		By("breaking glass on the failed run")
		update(ctx, cm, func(c *corev1.ConfigMap) {
			c.Annotations = map[string]string{v1alpha1.AnnotationAbandon: asRequest("alice: snapshot verified by hand")}
		})
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		run = runFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunAbandoned))
		Expect(run.Status.AbandonedBy).To(And(ContainSubstring("alice: snapshot verified by hand"), HavePrefix(adminName+" (annotation teardown.dev/abandon=")))
		Expect(run.Status.Message).To(ContainSubstring("the run had failed: step hard failed: timed out after 1s"),
			"the failure stays in the message after break glass")
		failed := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionFailed)
		Expect(failed).NotTo(BeNil())
		Expect(failed.Status).To(Equal(metav1.ConditionTrue))
		Expect(failed.Message).To(ContainSubstring("step hard failed"))
	})

	It("releases the target on failure with failurePolicy Release, and bounds the pipeline with its timeout", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "release", waitStep("long", time.Hour))
		p.Spec.FailurePolicy = v1alpha1.FailurePolicyRelease
		p.Spec.Timeout = dur(2 * time.Second)
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		run := runFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunFailed))
		Expect(run.Status.Message).To(ContainSubstring("timed out"))
		Expect(run.Status.CompletionTime.Sub(run.Status.StartTime.Time)).To(BeNumerically("~", 2*time.Second, 1500*time.Millisecond))
	})

	It("retries a failing attempt with backoff up to the limit", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "retry", v1alpha1.Step{
			Name:  "lookup-missing-kind",
			Retry: &v1alpha1.RetryPolicy{Limit: 2, Backoff: dur(time.Second)},
			Wait: &v1alpha1.WaitStep{Until: "size(things) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "things", APIVersion: "nowhere.example.com/v1", Kind: "Thing"}}},
		})
		p.Spec.FailurePolicy = v1alpha1.FailurePolicyRelease
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		run := runFor(ctx, cm)()
		step := run.Status.Step("lookup-missing-kind")
		Expect(step.Phase).To(Equal(v1alpha1.StepFailed))
		Expect(step.Attempts).To(Equal(int32(3)))
		Expect(step.Message).To(ContainSubstring("not served"))
		// Backoff 1s then 2s between the three attempts; status times have one-second precision.
		Expect(step.CompletionTime.Sub(step.StartTime.Time)).To(BeNumerically(">=", 2*time.Second))
		Eventually(eventReasons(ctx, run), 10*time.Second).Should(ContainElements(v1alpha1.ReasonStepRetrying, v1alpha1.ReasonStepFailed))
	})

	It("retries with a zero backoff without getting stuck", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "zero-backoff", v1alpha1.Step{
			Name:  "missing-kind",
			Retry: &v1alpha1.RetryPolicy{Limit: 3, Backoff: dur(0)},
			Wait:  &v1alpha1.WaitStep{Until: "true", Lookups: []v1alpha1.Lookup{{Name: "x", APIVersion: "nowhere.example.com/v1", Kind: "Thing"}}},
		})
		p.Spec.FailurePolicy = v1alpha1.FailurePolicyRelease
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		Expect(runFor(ctx, cm)().Status.Step("missing-kind").Attempts).To(Equal(int32(4)))
	})

	It("waits until looked-up objects are gone, woken by their deletion rather than the interval", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "parent", v1alpha1.Step{
			Name: "children-gone",
			Wait: &v1alpha1.WaitStep{
				Until:    "size(children) == 0",
				Interval: dur(time.Hour),
				Lookups: []v1alpha1.Lookup{{Name: "children", APIVersion: "v1", Kind: "Secret",
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"parent": "${object.metadata.name}"}}}},
			},
		})
		cm := protect(ctx, p, "target")
		child := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "child", Labels: map[string]string{"parent": "target"}}}
		unrelated := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrelated", Labels: map[string]string{"parent": "other"}}}
		Expect(k8s.Create(ctx, child)).To(Succeed())
		Expect(k8s.Create(ctx, unrelated)).To(Succeed())
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(stepPhase(ctx, cm, "children-gone"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Consistently(gone(ctx, cm), 2*time.Second).Should(BeFalse())

		Expect(k8s.Delete(ctx, child)).To(Succeed())
		Eventually(gone(ctx, cm), 5*time.Second).Should(BeTrue(), "deleting the child must wake the step long before its 1h interval")
		Expect(runFor(ctx, cm)().Status.Step("children-gone").Message).To(ContainSubstring("condition met"))
	})

	It("breaks glass on a running pipeline: skips the rest, releases, records who", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "glass", waitStep("forever", time.Hour), waitStep("after", 0))
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(stepPhase(ctx, cm, "forever"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		update(ctx, cm, func(c *corev1.ConfigMap) {
			c.Annotations = map[string]string{v1alpha1.AnnotationAbandon: asRequest("oncall: INC-42")}
		})
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		run := runFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunAbandoned))
		Expect(run.Status.AbandonedBy).To(ContainSubstring("oncall: INC-42"))
		Expect(run.Status.Step("forever").Phase).To(Equal(v1alpha1.StepSkipped))
		Expect(run.Status.Step("after").Phase).To(Equal(v1alpha1.StepSkipped))
		Eventually(eventReasons(ctx, run), 10*time.Second).Should(ContainElement(v1alpha1.ReasonAbandoned))
	})

	It("suspending a policy releases every target and abandons its runs", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "suspend", waitStep("forever", time.Hour))
		live := protect(ctx, p, "live")
		deleting := protect(ctx, p, "deleting")
		Expect(k8s.Delete(ctx, deleting)).To(Succeed())
		Eventually(stepPhase(ctx, deleting, "forever"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))

		update(ctx, p, func(p *v1alpha1.TeardownPolicy) { p.Spec.Suspend = true })
		Eventually(gone(ctx, deleting), 10*time.Second).Should(BeTrue())
		Eventually(finalizers(ctx, live), 10*time.Second).Should(BeEmpty())
		run := runFor(ctx, deleting)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunAbandoned))
		Expect(run.Status.AbandonedBy).To(ContainSubstring("spec.suspend"))
		cond := expectReady(ctx, p, metav1.ConditionFalse)
		Expect(cond.Reason).To(Equal(v1alpha1.ReasonSuspended))
	})

	It("deleting a policy waits for its in-flight runs, and releases its live targets", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "leaving", waitStep("hold", 3*time.Second))
		live := protect(ctx, p, "live")
		deleting := protect(ctx, p, "deleting")
		Expect(k8s.Delete(ctx, deleting)).To(Succeed())
		Eventually(stepPhase(ctx, deleting, "hold"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(finalizers(ctx, live), 10*time.Second).Should(BeEmpty())
		Expect(gone(ctx, p)()).To(BeFalse(), "the policy must wait for its run")
		Eventually(gone(ctx, deleting), 10*time.Second).Should(BeTrue())
		Expect(runPhase(ctx, deleting)()).To(Equal(v1alpha1.RunSucceeded), "the in-flight run finishes its steps")
		Eventually(gone(ctx, p), 10*time.Second).Should(BeTrue())
	})
})
