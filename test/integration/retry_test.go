package integration

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine"
)

// annotateRun sets an annotation on the run of a target.
func annotateRun(ctx context.Context, target client.Object, key, value string) *v1alpha1.TeardownRun {
	run := runFor(ctx, target)()
	Expect(run).NotTo(BeNil())
	update(ctx, run, func(r *v1alpha1.TeardownRun) {
		if r.Annotations == nil {
			r.Annotations = map[string]string{}
		}
		r.Annotations[key] = asRequest(value)
	})
	return run
}

func condition(run *v1alpha1.TeardownRun, typ string) *metav1.Condition {
	return meta.FindStatusCondition(run.Status.Conditions, typ)
}

var _ = Describe("Retry after a failure", func() {
	ctx := context.Background()

	It("resumes a Failed run at the step that failed, with fresh attempts, once the cause is fixed", func() {
		ns := newNamespace(ctx)
		var fixed atomic.Bool
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			if !fixed.Load() {
				http.Error(w, "bucket policy denies the export", http.StatusForbidden)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		p := namespacedPolicy(ns, "export", waitStep("first", 0),
			httpStep("export", v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, "/export")}), waitStep("after", 0))
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(runPhase(ctx, cm), 15*time.Second).Should(Equal(v1alpha1.RunFailed))

		run := runFor(ctx, cm)()
		Expect(run.Status.Message).To(And(HavePrefix("step export failed: "), ContainSubstring("403"), ContainSubstring("bucket policy denies the export")),
			"the run's message carries the step's reason")
		failedCond := condition(run, v1alpha1.ConditionFailed)
		Expect(failedCond).NotTo(BeNil())
		Expect(failedCond.Status).To(Equal(metav1.ConditionTrue))
		Expect(failedCond.Reason).To(Equal("StepFailed"))
		Expect(run.Status.Step("after").Phase).To(Equal(v1alpha1.StepSkipped))
		Consistently(gone(ctx, cm), time.Second).Should(BeFalse())

		By("fixing the cause and asking for a retry on the run")
		fixed.Store(true)
		annotateRun(ctx, cm, v1alpha1.AnnotationRetry, "alice: fixed the bucket policy")
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		run = runFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(run.Status.Retries).To(Equal(int32(1)))
		Expect(run.Status.LastRetry).NotTo(BeNil())
		Expect(run.Status.LastRetry.FromStep).To(Equal("export"))
		Expect(run.Status.LastRetry.RequestedBy).To(And(ContainSubstring("alice: fixed the bucket policy"), ContainSubstring("requested by "+adminName)))
		Expect(run.Status.LastRetry.Failure).To(ContainSubstring("step export failed"))
		Expect(run.Status.Step("first").Attempts).To(Equal(int32(1)), "a step that succeeded is not run again")
		export := run.Status.Step("export")
		Expect(export.Phase).To(Equal(v1alpha1.StepSucceeded))
		Expect(export.Attempts).To(Equal(int32(2)), "attempt numbers go on from the failed one")
		Expect(export.FirstAttempt).To(Equal(int32(2)))
		Expect(run.Status.Step("after").Phase).To(Equal(v1alpha1.StepSucceeded))
		Expect(condition(run, v1alpha1.ConditionFailed).Status).To(Equal(metav1.ConditionFalse))
		Expect(run.Annotations).NotTo(HaveKey(v1alpha1.AnnotationRetry), "the request is removed once recorded")
		Expect(api.calls(ns, "POST /"+ns+"/export")()).To(Equal(2))
		Eventually(probe().EventNotes(ctx, run), 10*time.Second).Should(ContainElement(
			And(HavePrefix(v1alpha1.ReasonRetried+": "), ContainSubstring("resuming at step export"))))
	})

	It("refuses a retry of a run that has not failed, and says why", func() {
		ns := newNamespace(ctx)
		cm := protect(ctx, namespacedPolicy(ns, "busy", waitStep("hold", time.Hour)), "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(stepPhase(ctx, cm, "hold"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		run := annotateRun(ctx, cm, v1alpha1.AnnotationRetry, "bob")
		Eventually(probe().EventNotes(ctx, run), 10*time.Second).Should(ContainElement(
			And(HavePrefix(v1alpha1.ReasonRetryRefused+": "), ContainSubstring("the run is Running, not Failed"))))
		Eventually(func() map[string]string { return runFor(ctx, cm)().Annotations }, 5*time.Second).ShouldNot(HaveKey(v1alpha1.AnnotationRetry))
		Expect(runFor(ctx, cm)().Status.Retries).To(BeZero())
		update(ctx, cm, func(c *corev1.ConfigMap) {
			c.Annotations = map[string]string{v1alpha1.AnnotationAbandon: asRequest("test over")}
		})
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
	})

	It("lets retention delete rejected runs", Serial, func() {
		restartOperatorWith(func(o *engine.Options) { o.RunRetention = 2 * time.Second })
		ns := newNamespace(ctx)
		cm := configMap(ns, "held", nil)
		cm.Finalizers = []string{"example.com/hold"}
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		forged := &v1alpha1.TeardownRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged", Finalizers: []string{v1alpha1.FinalizerRun}},
			Spec: v1alpha1.TeardownRunSpec{
				PolicyRef: v1alpha1.PolicyReference{Kind: "TeardownPolicy", Namespace: ns, Name: "p", UID: "x"},
				Target:    v1alpha1.TargetObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "held", UID: cm.UID},
				Finalizer: "example.com/hold",
				Pipeline:  v1alpha1.Pipeline{Steps: []v1alpha1.Step{waitStep("a", 0)}},
			},
		}
		Expect(k8s.Create(ctx, forged)).To(Succeed())
		Eventually(func() string {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(forged), forged)
			return forged.Status.Message
		}, 10*time.Second).Should(ContainSubstring("rejected"))
		Expect(condition(forged, v1alpha1.ConditionFailed).Reason).To(Equal("Rejected"))
		Eventually(gone(ctx, forged), 10*time.Second).Should(BeTrue(), "a rejected run expires like any finished run")
		Expect(finalizers(ctx, cm)()).To(Equal([]string{"example.com/hold"}), "and releases nothing")
		update(ctx, cm, func(c *corev1.ConfigMap) { c.Finalizers = nil })
	})
})
