package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/faultinject"
)

// travelPolicies sit beside the scenario's cp: late records its run before its http step (a
// wait first), now succeeds at once and so leaves no run (runHistory SkipImmediateSuccess).
const travelPolicies = `
apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata: {name: late}
spec:
  targetRef: {apiVersion: v1, kind: ConfigMap}
  selector: {matchLabels: {app: late}}
  steps:
  - {name: settle, wait: {duration: 1s}}
  - {name: notify, http: {method: POST, url: "%[1]s/%[2]s/late/notify/${object.metadata.name}"}}
---
apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata: {name: now}
spec:
  targetRef: {apiVersion: v1, kind: ConfigMap}
  selector: {matchLabels: {app: now}}
  steps:
  - {name: notify, http: {method: POST, url: "%[1]s/%[2]s/now/notify/${object.metadata.name}"}}
`

// travelHold is how long the restarted operator's caches show the past before they catch up.
const travelHold = 10 * time.Second

var _ = Describe("Stale reads: a restarted operator served the past", func() {
	It("repeats no step, starts no run twice and releases nothing early when its first view is stale", func(ctx SpecContext) {
		srv, flags := steadyServer()
		ns := "tt-" + runID()
		By("an operator that records two runs in their first steps, then dies")
		a := launch(operatorBin, nil, kubeconfig, flags...)
		a.waitLeading(time.Minute)
		sc := newScenario(ctx, srv, ns, "Finalizer", "c-early", "c-before", "c-after")
		createTravelPolicies(ctx, srv, ns, map[string]string{"l-early": "late", "n-before": "now"})
		deleteObjects(ctx, ns, "c-early", "l-early")
		waitStep(ctx, ns, "c-early", "notify", v1alpha1.StepSucceeded)
		waitStep(ctx, ns, "l-early", "settle", v1alpha1.StepRunning)
		a.kill()

		By("deletions while no operator runs; the past is now")
		deleteObjects(ctx, ns, "c-before", "n-before")
		var past corev1.ConfigMapList
		Expect(k8s.List(ctx, &past, client.InNamespace(ns))).To(Succeed()) // a quorum read: etcd's revision now
		rv := past.ResourceVersion

		By("a second operator finishes them, starts one more teardown and dies in it")
		b := launch(operatorBin, nil, kubeconfig, flags...)
		b.waitLeading(time.Minute)
		for _, name := range []string{"c-early", "c-before", "l-early", "n-before"} {
			Eventually(probeFinalizers(ctx, sc.object(name)), 2*time.Minute, 100*time.Millisecond).Should(Equal([]string{foreignFinalizer}), "%s was not released", name)
		}
		deleteObjects(ctx, ns, "c-after")
		waitStep(ctx, ns, "c-after", "notify", v1alpha1.StepSucceeded)
		b.kill()

		By(fmt.Sprintf("a third operator whose caches start at resourceVersion %s and catch up after %s", rv, travelHold))
		restartedAt := time.Now()
		c := launch(faultBin, []string{faultinject.EnvTimeTravel + "=" + rv + ":" + travelHold.String()}, kubeconfig, flags...)
		defer c.stop()
		Eventually(probeFinalizers(ctx, sc.object("c-after")), 2*time.Minute, 100*time.Millisecond).Should(Equal([]string{foreignFinalizer}), "c-after was not released")
		// What a stale view would repeat, it would repeat while the caches show the past: the
		// spec looks once they have caught up and had time to act.
		time.Sleep(time.Until(c.started.Add(travelHold + 5*time.Second)))
		log := c.log.String()
		for _, cache := range []string{"objects teardownruns", "metadata configmaps", "objects jobs"} {
			Expect(log).To(MatchRegexp(`time travel: %s .* listed at resourceVersion %s`, cache, rv), "the %s cache did not start from the past", cache)
		}
		Expect(log).To(ContainSubstring("time travel: the watch of objects teardownruns"))

		By("checking that every teardown ran once")
		sc.objects = []string{"c-early", "c-before", "c-after"}
		problems := sc.problems(ctx, restartedAt, 1)
		problems = append(problems, travelProblems(ctx, srv, ns, map[string]string{"l-early": "late", "n-before": "now"})...)
		Expect(problems).To(BeEmpty())
		Expect(c.exited()).To(BeFalse(), "the operator died:\n%s", log)
		releaseObjects(ctx, ns, "l-early", "n-before")
		sc.finish(ctx)
		for _, name := range []string{"late", "now"} {
			Expect(k8s.Delete(ctx, &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
		}
		AddReportEntry("time travel", fmt.Sprintf("caches started at resourceVersion %s and caught up after %s: 5 teardowns (runs recorded before that moment, deletions before it, a deletion after it) each ran once", rv, travelHold))
	})
})

// createTravelPolicies creates the late and now policies, and objects of them (name: policy)
// with the other controller's finalizer too, and waits until each is armed.
func createTravelPolicies(ctx context.Context, srv *flakyServer, ns string, objects map[string]string) {
	GinkgoHelper()
	for _, doc := range strings.Split(fmt.Sprintf(travelPolicies, srv.srv.URL, ns), "\n---\n") {
		p := &v1alpha1.TeardownPolicy{}
		Expect(yaml.UnmarshalStrict([]byte(doc), p)).To(Succeed())
		p.Namespace = ns
		Expect(k8s.Create(ctx, p)).To(Succeed())
	}
	for name, policy := range objects {
		Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{"app": policy}, Finalizers: []string{foreignFinalizer}}})).To(Succeed())
	}
	for name, policy := range objects {
		Eventually(probeFinalizers(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}), time.Minute, 100*time.Millisecond).
			Should(ContainElement("teardownpolicy.teardown.dev/"+policy), "%s was never armed", name)
	}
}

func deleteObjects(ctx context.Context, ns string, names ...string) {
	GinkgoHelper()
	for _, name := range names {
		Expect(k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	}
}

// releaseObjects removes the other controller's finalizer, as it would once done.
func releaseObjects(ctx context.Context, ns string, names ...string) {
	GinkgoHelper()
	for _, name := range names {
		Expect(client.IgnoreNotFound(k8s.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))))).To(Succeed())
	}
}

// waitStep waits until the run of the object's deletion records step in phase.
func waitStep(ctx context.Context, ns, object, step string, phase v1alpha1.StepPhase) {
	GinkgoHelper()
	Eventually(func() v1alpha1.StepPhase {
		var runs v1alpha1.TeardownRunList
		if err := k8s.List(ctx, &runs, client.InNamespace(ns)); err != nil {
			return ""
		}
		for _, run := range runs.Items {
			if run.Spec.Target.Name != object {
				continue
			}
			for _, s := range run.Status.Steps {
				if s.Name == step {
					return s.Phase
				}
			}
		}
		return ""
	}, time.Minute, 20*time.Millisecond).Should(Equal(phase), "the run of %s never recorded %s %s", object, step, phase)
}

// travelProblems checks the late and now teardowns: released, their http step called once, and
// late's run (now keeps none) Succeeded.
func travelProblems(ctx context.Context, srv *flakyServer, ns string, objects map[string]string) []string {
	GinkgoHelper()
	var out []string
	calls := srv.snapshot()
	for name, policy := range objects {
		if n := len(calls[fmt.Sprintf("/%s/%s/notify/%s", ns, policy, name)]); n != 1 {
			out = append(out, fmt.Sprintf("%s: %s's notify called %d times (want once)", name, policy, n))
		}
		var runs v1alpha1.TeardownRunList
		Expect(k8s.List(ctx, &runs, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelTargetNamespace: ns})).To(Succeed())
		count := 0
		for _, run := range runs.Items {
			if run.Spec.Target.Name != name {
				continue
			}
			count++
			if run.Status.Phase != v1alpha1.RunSucceeded {
				out = append(out, fmt.Sprintf("%s: run %s", name, run.Status.Phase))
			}
		}
		if want := map[string]int{"late": 1, "now": 0}[policy]; count != want {
			out = append(out, fmt.Sprintf("%s: %d runs (want %d)", name, count, want))
		}
	}
	return out
}
