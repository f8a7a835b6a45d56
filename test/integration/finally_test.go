package integration

import (
	"context"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/cli"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
)

// notifyStep posts how the run ended to the suite's endpoint under ns, at path.
func notifyStep(ns, name, when, path string) v1alpha1.Step {
	return v1alpha1.Step{Name: name, When: when, HTTP: &v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, path),
		JSONBody: "{'phase': run.phase, 'message': run.message, 'object': object.metadata.name}"}}
}

// posts returns the bodies the endpoint received under ns at path.
func posts(ns, path string) func() []string {
	return func() []string {
		var out []string
		for _, r := range api.requests(ns) {
			if strings.HasPrefix(r.Path, "/"+ns+path) {
				out = append(out, r.Body)
			}
		}
		return out
	}
}

var _ = Describe("Finally and onStuck steps", func() {
	ctx := context.Background()

	It("run once on each ending, see it, and never keep the object by failing", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			switch {
			case strings.HasSuffix(r.URL.Path, "/fail"):
				http.Error(w, "no", http.StatusBadRequest)
			case strings.HasSuffix(r.URL.Path, "/broken"):
				http.Error(w, "webhook down", http.StatusServiceUnavailable)
			default:
				w.WriteHeader(http.StatusOK)
			}
		})
		chat := notifyStep(ns, "chat", "", "/chat")
		broken := notifyStep(ns, "broken", "", "/broken")
		broken.Retry = &v1alpha1.RetryPolicy{Limit: 1, Backoff: dur(100 * time.Millisecond)}

		By("success: the object goes although a finally step fails")
		ok := namespacedPolicy(ns, "ok", waitStep("work", 0))
		ok.Spec.Finally = []v1alpha1.Step{broken, chat}
		cm := protect(ctx, ok, "ok-target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		Eventually(posts(ns, "/chat"), 5*time.Second).Should(ConsistOf(MatchJSON(`{"phase":"Succeeded","message":"all steps done","object":"ok-target"}`)))
		run := runFor(ctx, cm)()
		Expect(run).NotTo(BeNil(), "a failed finally step leaves a run, as any failed step does")
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(run.Status.Step("broken").Phase).To(Equal(v1alpha1.StepFailed))
		Expect(run.Status.Message).To(ContainSubstring("finally step broken failed"))
		Expect(posts(ns, "/broken")()).To(HaveLen(2), "retried within its limit")

		By("a pipeline timeout: Failed, the object kept, the chat told once")
		slow := namespacedPolicy(ns, "slow", waitStep("work", time.Hour))
		slow.Spec.Timeout = dur(2 * time.Second)
		slow.Spec.Finally = []v1alpha1.Step{notifyStep(ns, "chat", "run.phase != 'Succeeded'", "/timeout")}
		timed := protect(ctx, slow, "slow-target")
		Expect(k8s.Delete(ctx, timed)).To(Succeed())
		Eventually(runPhase(ctx, timed), 15*time.Second).Should(Equal(v1alpha1.RunFailed))
		Expect(posts(ns, "/timeout")()).To(ConsistOf(MatchJSON(`{"phase":"Failed","message":"pipeline timed out after 2s","object":"slow-target"}`)))
		Consistently(finalizers(ctx, timed), 2*time.Second).Should(ContainElement(finalizerOf(slow)))

		By("break glass on the failed run: Abandoned, a second ending, the chat told again with a new Idempotency-Key")
		run = runFor(ctx, timed)()
		_, errOut, code := kubectlTeardownAs(writeKubeconfig(cfg), "abandon", "configmap/slow-target", "-n", ns, "--reason", "INC-7: done by hand")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Eventually(gone(ctx, timed), 15*time.Second).Should(BeTrue())
		Expect(posts(ns, "/timeout")()).To(HaveLen(2))
		Expect(posts(ns, "/timeout")()[1]).To(ContainSubstring(`"phase":"Abandoned"`))
		var keys []string
		for _, r := range api.requests(ns) {
			if strings.HasPrefix(r.Path, "/"+ns+"/timeout") {
				keys = append(keys, r.Header.Get(httpstep.HeaderIdempotencyKey))
			}
		}
		Expect(keys).To(Equal([]string{httpstep.IdempotencyKey(deletionID(run), "chat", 0), httpstep.IdempotencyKey(deletionID(run), "chat", 0) + "-e2"}))
		run = runFor(ctx, timed)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunAbandoned))
		Expect(run.Status.Endings).To(Equal(int32(2)))
		Expect(run.Status.Step("chat").Attempts).To(Equal(int32(2)))
	})

	It("holds the object while a finally step runs, at most for its timeout", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		p := namespacedPolicy(ns, "hold", waitStep("work", 0))
		hang := v1alpha1.Step{Name: "hang", Timeout: dur(3 * time.Second), Wait: &v1alpha1.WaitStep{Until: "false", Interval: dur(time.Hour)}}
		p.Spec.Finally = []v1alpha1.Step{hang, notifyStep(ns, "chat", "steps.hang.phase == 'Failed'", "/chat")}
		cm := protect(ctx, p, "held")
		start := time.Now()
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(func() *v1alpha1.RunEnding {
			if r := runFor(ctx, cm)(); r != nil {
				return r.Status.Ending
			}
			return nil
		}, 5*time.Second).ShouldNot(BeNil())
		run := runFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunRunning))
		Expect(run.Status.Ending.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(run.Status.CurrentStep).To(Equal("hang"))
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		Expect(time.Since(start)).To(BeNumerically(">=", 3*time.Second))
		Expect(posts(ns, "/chat")()).To(HaveLen(1))
		Expect(runFor(ctx, cm)().Status.Phase).To(Equal(v1alpha1.RunSucceeded), "the ending stands")
	})

	It("pages once when a run becomes stuck, and the pipeline goes on", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		p := namespacedPolicy(ns, "stuck", waitStep("work", time.Hour))
		p.Spec.OnStuck = []v1alpha1.Step{notifyStep(ns, "page", "run.phase == 'Running'", "/page")}
		cm := protect(ctx, p, "stuck-target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		// The suite's operator runs with --stuck-after 6s.
		Eventually(posts(ns, "/page"), stuckAfter+10*time.Second).Should(HaveLen(1))
		Consistently(posts(ns, "/page"), 3*time.Second).Should(HaveLen(1), "once per run")
		run := runFor(ctx, cm)()
		Expect(run.Status.StuckTime).NotTo(BeNil())
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunRunning))
		Expect(run.Status.CurrentStep).To(Equal("work"))
		Expect(eventReasons(ctx, cm)()).To(ContainElement(v1alpha1.ReasonRunStuck))

		By("a failed run that keeps its object is paged too")
		failing := namespacedPolicy(ns, "failing", httpStep("call", v1alpha1.HTTPStep{URL: api.url(ns, "/fail")}))
		failing.Spec.Steps[0].HTTP.SuccessCondition = "response.status == 599"
		failing.Spec.OnStuck = []v1alpha1.Step{notifyStep(ns, "page", "", "/page-failed")}
		kept := protect(ctx, failing, "kept")
		Expect(k8s.Delete(ctx, kept)).To(Succeed())
		Eventually(runPhase(ctx, kept), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		Expect(posts(ns, "/page-failed")()).To(BeEmpty())
		Eventually(posts(ns, "/page-failed"), stuckAfter+10*time.Second).Should(ConsistOf(ContainSubstring(`"phase":"Failed"`)))
	})
})
