package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// chaosPolicies are the three pipelines under test: http steps against the flaky server, a job
// step whose pod kwok runs for a second, and wait steps, in different orders.
func chaosPolicies(ns, base string) []*v1alpha1.TeardownPolicy {
	retry := &v1alpha1.RetryPolicy{Limit: 50, Backoff: framework.Dur(200 * time.Millisecond), MaxBackoff: framework.Dur(2 * time.Second)}
	post := func(name, path string) v1alpha1.Step {
		return v1alpha1.Step{Name: name, Retry: retry, HTTP: &v1alpha1.HTTPStep{Method: "POST", URL: base + "/" + ns + path + "/${object.metadata.name}"}}
	}
	job := framework.JobStep("dump", framework.Container("registry.example.com/dump:1",
		map[string]string{"teardown.dev/kwok-duration": "10s"}, "dump", "${object.metadata.name}"))
	return []*v1alpha1.TeardownPolicy{
		framework.NamespacedPolicy(ns, "a", post("notify", "/a/notify"), framework.WaitStep("settle", 20*time.Second), post("confirm", "/a/confirm")),
		framework.NamespacedPolicy(ns, "b", job, post("upload", "/b/upload")),
		framework.NamespacedPolicy(ns, "c", framework.WaitStep("drain", 30*time.Second), post("release", "/c/release")),
	}
}

var _ = Describe("SIGKILL mid pipeline", func() {
	It("releases no object early, leaves none stuck, repeats no recorded step, and keeps Idempotency-Keys and Job names", func(ctx SpecContext) {
		objects, kills := sizeFromEnv("CHAOS_OBJECTS", 200), sizeFromEnv("CHAOS_KILLS", 20)
		srv := newFlakyServer()
		DeferCleanup(srv.srv.Close)
		// One replica without leader election: a restart acts within a second or two, so that the
		// kills land while pipelines are in flight (the failover spec runs the default election).
		flags := []string{"--leader-elect=false", "--http-allowed-destinations", strings.TrimPrefix(srv.srv.URL, "http://")}
		op := startOperator(flags...)
		DeferCleanup(func() { op.stop() })
		op.waitLeading(time.Minute)
		ns := "chaos-kill"
		deployChaos(ctx, ns, srv.srv.URL, objects)
		watch := observe(ctx, ns)

		By(fmt.Sprintf("deleting %d objects at once, then killing the operator %d times", objects, kills))
		Expect(k8s.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.HasLabels{"app"})).To(Succeed())
		var resume []time.Duration
		for range kills {
			time.Sleep(time.Duration(200+rand.IntN(1000)) * time.Millisecond)
			if remaining(ctx, ns) == 0 {
				break // every pipeline ended: a kill now would prove nothing
			}
			op.kill()
			op = startOperator(flags...)
			resume = append(resume, op.waitLeading(time.Minute))
		}
		Expect(len(resume)).To(Equal(kills), "every kill must land mid pipeline, with objects left to tear down")
		faultsEnd := time.Now()
		Eventually(func() int { return remaining(ctx, ns) }, 5*time.Minute, time.Second).Should(BeZero(), "objects stuck after the faults stopped")
		settled := time.Since(faultsEnd)

		checkKillInvariants(ctx, ns, objects, srv, watch)
		Expect(repeatedBirths(ns)).To(BeEmpty())
		sort.Slice(resume, func(i, j int) bool { return resume[i] < resume[j] })
		report := fmt.Sprintf("%d objects, %d SIGKILLs survived; lost 0, stuck 0 (all gone %s after the last restart); "+
			"resume after a kill (restart to workers started): p50 %s, max %s; %d http requests, %d Jobs, none created twice",
			objects, kills, settled.Round(100*time.Millisecond), resume[len(resume)/2].Round(100*time.Millisecond),
			resume[len(resume)-1].Round(100*time.Millisecond), countRequests(srv), watch.jobs())
		AddReportEntry("chaos: kills", report)
		GinkgoWriter.Println(report)
	})
})

// remaining counts the objects of the test left in ns.
func remaining(ctx context.Context, ns string) int {
	var list corev1.ConfigMapList
	if err := k8s.List(ctx, &list, client.InNamespace(ns), client.HasLabels{"app"}); err != nil {
		return -1
	}
	return len(list.Items)
}

func countRequests(srv *flakyServer) int {
	n := 0
	for _, rs := range srv.snapshot() {
		n += len(rs)
	}
	return n
}

// checkKillInvariants checks every object's one run and what the world saw of it.
func checkKillInvariants(ctx context.Context, ns string, objects int, srv *flakyServer, watch *observer) {
	var runs v1alpha1.TeardownRunList
	Expect(k8s.List(ctx, &runs, client.MatchingLabels{v1alpha1.LabelTargetNamespace: ns})).To(Succeed())
	byTarget := map[string][]v1alpha1.TeardownRun{}
	for _, r := range runs.Items {
		byTarget[r.Spec.Target.Name] = append(byTarget[r.Spec.Target.Name], r)
	}
	Expect(byTarget).To(HaveLen(objects), "every object has a run")
	requests, writes := srv.snapshot(), runWrites()
	var problems []string
	for name, rs := range byTarget {
		if len(rs) != 1 {
			problems = append(problems, fmt.Sprintf("%s: %d runs", name, len(rs)))
			continue
		}
		problems = append(problems, checkRun(&rs[0], requests, writes[rs[0].Namespace+"/"+rs[0].Name], watch)...)
	}
	for path, rs := range requests {
		if !strings.HasPrefix(path, "/"+ns+"/") {
			continue // another spec's
		}
		keys := map[string]bool{}
		for _, r := range rs {
			keys[r.key] = true
		}
		if len(keys) != 1 {
			problems = append(problems, fmt.Sprintf("%s: %d requests with %d Idempotency-Keys", path, len(rs), len(keys)))
		}
	}
	if twice := watch.jobsCreatedTwice(); len(twice) > 0 {
		problems = append(problems, "Jobs created twice for one attempt: "+strings.Join(twice, ", "))
	}
	slices.Sort(problems)
	Expect(problems).To(BeEmpty())
}

// checkRun checks one object's run: it succeeded, every step once; the object went after the
// run ended; no http step was called after the operator knew its success was recorded (the
// answer to the write of it, from the audit log).
func checkRun(run *v1alpha1.TeardownRun, requests map[string][]request, writes []auditEvent, watch *observer) []string {
	var out []string
	name := run.Spec.Target.Name
	if run.Status.Phase != v1alpha1.RunSucceeded {
		return []string{fmt.Sprintf("%s: run %s: %s", name, run.Status.Phase, run.Status.Message)}
	}
	// Times in status are whole seconds: an object that went within the run's last second
	// counts as released in time.
	done := run.Status.CompletionTime.Time
	if gone, ok := watch.gone(name); !ok || gone.Before(done) {
		out = append(out, fmt.Sprintf("%s: gone at %s, before its run completed at %s", name, gone.Format(time.RFC3339Nano), done))
	}
	policy := run.Spec.PolicyRef.Name
	for _, ss := range run.Status.Steps {
		if ss.Phase != v1alpha1.StepSucceeded {
			out = append(out, fmt.Sprintf("%s: step %s %s", name, ss.Name, ss.Phase))
			continue
		}
		recorded, ok := recordedAt(writes, ss.Name)
		if !ok {
			// The write that stored it was never answered to the operator (a 504 from a loaded
			// API server, a kill): it never knew, and a repeat was allowed.
			continue
		}
		for _, r := range requests[fmt.Sprintf("/%s/%s/%s/%s", run.Spec.Target.Namespace, policy, ss.Name, name)] {
			if r.at.After(recorded) {
				out = append(out, fmt.Sprintf("%s: step %s called at %s, after its success was recorded at %s", name, ss.Name,
					r.at.Format(time.RFC3339Nano), recorded.Format(time.RFC3339Nano)))
			}
		}
	}
	return out
}
