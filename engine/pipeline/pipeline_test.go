package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

var t0 = time.Unix(1_000_000, 0)

// scripted is a step action that answers from a script, one result per call, the last repeated.
type scripted struct {
	results []steps.Result
	calls   int
}

func (s *scripted) Execute(context.Context, *steps.Input) steps.Result {
	r := s.results[min(s.calls, len(s.results)-1)]
	s.calls++
	return r
}

// settler is a scripted action whose work ended by the deadline while no one looked.
type settler struct {
	scripted
	settled steps.Result
}

func (s *settler) Settled(context.Context, *steps.Input, time.Time) (steps.Result, bool) {
	return s.settled, true
}

func step(name string, a steps.Action, edit ...func(*v1alpha1.Step)) *policy.Step {
	s := &policy.Step{Spec: v1alpha1.Step{Name: name}, Kind: "test", Action: a}
	for _, e := range edit {
		e(&s.Spec)
	}
	return s
}

func script(results ...steps.Result) *scripted { return &scripted{results: results} }

func runOf(fp v1alpha1.FailurePolicy, timeout time.Duration, ps ...*policy.Step) (*v1alpha1.TeardownRun, *policy.Pipeline) {
	run := &v1alpha1.TeardownRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u"}}
	run.Spec.PolicyRef = v1alpha1.PolicyReference{Kind: policy.KindNamespaced, Namespace: "ns", Name: "p"}
	run.Spec.Finalizer = "teardownpolicy.teardown.dev/p"
	run.Spec.Pipeline.FailurePolicy = fp
	if timeout > 0 {
		run.Spec.Pipeline.Timeout = &metav1.Duration{Duration: timeout}
	}
	pipe := &policy.Pipeline{FailurePolicy: fp, Spec: &run.Spec.Pipeline}
	for _, s := range ps {
		run.Spec.Pipeline.Steps = append(run.Spec.Pipeline.Steps, s.Spec)
		pipe.Steps = append(pipe.Steps, s)
	}
	return run, pipe
}

func at(pipe *policy.Pipeline, d time.Duration) Facts { return Facts{Now: t0.Add(d), Pipeline: pipe} }

func phases(run *v1alpha1.TeardownRun) string {
	var b strings.Builder
	b.WriteString(string(run.Status.Phase))
	for _, s := range run.Status.Steps {
		b.WriteString(" " + s.Name + "=" + string(s.Phase))
	}
	return b.String()
}

func reasons(out Effects) string {
	var rs []string
	for _, e := range out.Events {
		rs = append(rs, e.Reason)
	}
	return strings.Join(rs, ",")
}

func expect(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

func when(src string) func(*v1alpha1.Step) { return func(s *v1alpha1.Step) { s.When = src } }

// guarded compiles the step's when into the compiled step, as the compiler would.
func guarded(t *testing.T, s *policy.Step) *policy.Step {
	env, _ := expr.NewEnv()
	prog, err := env.CompileCondition(s.Spec.When)
	if err != nil {
		t.Fatal(err)
	}
	s.When = prog
	return s
}

// A run that goes on past its first pass says so at once (TeardownStarted), and tells each step
// as it ends.
func TestEventsOfARunOfSeveralPasses(t *testing.T) {
	calls := 0
	later := steps.ActionFunc(func(context.Context, *steps.Input) steps.Result {
		if calls++; calls == 1 {
			return steps.Waiting(time.Second, "not yet")
		}
		return steps.Done("done")
	})
	run, pipe := runOf("", 0, step("first", steps.Nop{}), step("later", later))
	out := Advance(context.Background(), run, at(pipe, 0))
	expect(t, "first pass events", reasons(out), "TeardownStarted,StepSucceeded,StepStarted")
	if !strings.Contains(out.Events[0].Note, "Deletion held by TeardownPolicy/ns/p until TeardownRun ns/r completes") {
		t.Errorf("TeardownStarted note: %q", out.Events[0].Note)
	}
	out = Advance(context.Background(), run, at(pipe, time.Second))
	expect(t, "second pass events", reasons(out), "StepSucceeded,TeardownSucceeded")
	expect(t, "phases", phases(run), "Succeeded first=Succeeded later=Succeeded")
}

func TestGuardSkipsAndInstantSteps(t *testing.T) {
	run, pipe := runOf("", 0,
		guarded(t, step("skipped", steps.Nop{}, when("object.?tier.orValue('') == 'prod'"))),
		step("instant", steps.Nop{}),
		guarded(t, step("broken", steps.Nop{}, when("object.tier == 'prod'"), func(s *v1alpha1.Step) { s.OnFailure = v1alpha1.OnFailureContinue })))
	out := Advance(context.Background(), run, at(pipe, 0))
	expect(t, "phases", phases(run), "Succeeded skipped=Skipped instant=Succeeded broken=Failed")
	// A run that ends in its first pass tells it in one event (on the run and on its object);
	// warnings stay.
	expect(t, "events", reasons(out), "StepFailed,TeardownSucceeded")
	if !strings.Contains(run.Status.Step("broken").Message, "when: ") {
		t.Errorf("a when that cannot be evaluated fails the step, saying so: %q", run.Status.Step("broken").Message)
	}
	if note := out.Events[1].Note; !strings.Contains(note, "at once (steps: skipped skipped, instant succeeded, broken failed)") {
		t.Errorf("the run's one event names its steps: %q", note)
	}
	if out.RequeueAfter != 0 || len(out.Observations) == 0 || out.Observations[len(out.Observations)-1].Metric != PipelineDuration {
		t.Errorf("effects = %+v", out)
	}
}

func TestRetryWithBackoffAndRetryAfter(t *testing.T) {
	flaky := script(steps.Fail(true, "503"), steps.Result{Outcome: steps.Failed, Retryable: true, Message: "429", RetryAfter: 7 * time.Second}, steps.Done("ok"))
	run, pipe := runOf("", 0, step("call", flaky, func(s *v1alpha1.Step) {
		s.Retry = &v1alpha1.RetryPolicy{Limit: 2, Backoff: &metav1.Duration{Duration: 2 * time.Second}}
	}))
	out := Advance(context.Background(), run, at(pipe, 0))
	if out.RequeueAfter != 2*time.Second || run.Status.Step("call").RetryTime == nil {
		t.Fatalf("after a retryable failure: requeue %s, status %+v", out.RequeueAfter, run.Status.Step("call"))
	}
	expect(t, "settled", strings.Join(out.Settled, ","), "call")
	out = Advance(context.Background(), run, at(pipe, time.Second)) // too early: nothing runs
	if flaky.calls != 1 || out.RequeueAfter != time.Second {
		t.Fatalf("before the retry time: calls %d, requeue %s", flaky.calls, out.RequeueAfter)
	}
	out = Advance(context.Background(), run, at(pipe, 2*time.Second))
	if out.RequeueAfter != 7*time.Second {
		t.Errorf("Retry-After replaces the backoff: requeue %s", out.RequeueAfter)
	}
	Advance(context.Background(), run, at(pipe, 9*time.Second))
	expect(t, "phases", phases(run), "Succeeded call=Succeeded")
	if ss := run.Status.Step("call"); ss.Attempts != 3 {
		t.Errorf("attempts = %d, want 3", ss.Attempts)
	}
}

func TestStepTimeoutContinueAndFail(t *testing.T) {
	forever := script(steps.Waiting(time.Minute, "waiting"))
	run, pipe := runOf(v1alpha1.FailurePolicyRetain, 0,
		step("soft", forever, func(s *v1alpha1.Step) {
			s.Timeout, s.OnFailure = &metav1.Duration{Duration: 10 * time.Second}, v1alpha1.OnFailureContinue
		}),
		step("hard", script(steps.Waiting(time.Minute, "waiting")), func(s *v1alpha1.Step) { s.Timeout = &metav1.Duration{Duration: 10 * time.Second} }),
		step("never", steps.Nop{}))
	out := Advance(context.Background(), run, at(pipe, 0))
	if out.RequeueAfter != 10*time.Second {
		t.Errorf("a wait is capped at the step's deadline: %s", out.RequeueAfter)
	}
	Advance(context.Background(), run, at(pipe, 10*time.Second))
	expect(t, "after soft's timeout", phases(run), "Running soft=Failed hard=Running never=Pending")
	out = Advance(context.Background(), run, at(pipe, 20*time.Second))
	expect(t, "after hard's timeout", phases(run), "Failed soft=Failed hard=Failed never=Skipped")
	if !strings.HasPrefix(run.Status.Message, "step hard failed: timed out after 10s") {
		t.Errorf("message = %q", run.Status.Message)
	}
	if !strings.Contains(out.Events[len(out.Events)-1].Note, "failurePolicy Retain keeps the object") {
		t.Errorf("last event = %+v", out.Events[len(out.Events)-1])
	}
}

func TestPipelineTimeoutAndRelease(t *testing.T) {
	run, pipe := runOf(v1alpha1.FailurePolicyRelease, 30*time.Second, step("slow", script(steps.Waiting(time.Hour, "slow"))))
	out := Advance(context.Background(), run, at(pipe, 0))
	if out.RequeueAfter != 30*time.Second {
		t.Errorf("the pipeline deadline caps the wait: %s", out.RequeueAfter)
	}
	out = Advance(context.Background(), run, at(pipe, 30*time.Second))
	expect(t, "phases", phases(run), "Failed slow=Failed")
	expect(t, "events", reasons(out), "PipelineTimedOut,TeardownFailed")
	if !run.Status.Phase.Releases(run.Spec.Pipeline.FailurePolicy) || !strings.Contains(out.Events[1].Note, "failurePolicy Release") {
		t.Errorf("Release lets the object go: %+v", out.Events[1])
	}
	if c := metaCondition(run, v1alpha1.ConditionFailed); c == nil || c.Reason != v1alpha1.ReasonPipelineTimedOut {
		t.Errorf("Failed condition = %+v", c)
	}
}

func TestBreakGlassMidStep(t *testing.T) {
	run, pipe := runOf("", 0, step("hold", script(steps.Waiting(time.Hour, "holding"))), step("next", steps.Nop{}))
	Advance(context.Background(), run, at(pipe, 0))
	f := at(pipe, time.Minute)
	f.BreakGlass = `annotation teardown.dev/abandon="alice"`
	out := Advance(context.Background(), run, f)
	expect(t, "phases", phases(run), "Abandoned hold=Skipped next=Skipped")
	expect(t, "settled", strings.Join(out.Settled, ","), "hold")
	if run.Status.AbandonedBy != f.BreakGlass {
		t.Errorf("abandonedBy = %q", run.Status.AbandonedBy)
	}
}

func TestSettlerAfterDowntime(t *testing.T) {
	job := &settler{scripted: *script(steps.Waiting(time.Minute, "running")), settled: steps.Done("Job completed")}
	run, pipe := runOf("", 0, step("dump", job, func(s *v1alpha1.Step) { s.Timeout = &metav1.Duration{Duration: time.Minute} }))
	Advance(context.Background(), run, at(pipe, 0))
	// The operator was down past the deadline; the Job had completed by then.
	Advance(context.Background(), run, at(pipe, time.Hour))
	expect(t, "phases", phases(run), "Succeeded dump=Succeeded")
	if msg := run.Status.Step("dump").Message; msg != "Job completed (by the step's deadline)" {
		t.Errorf("message = %q", msg)
	}
}

func TestRestartResumesAtTheSameStep(t *testing.T) {
	first, second := script(steps.Done("one")), script(steps.Waiting(time.Minute, "two"), steps.Done("two"))
	run, pipe := runOf("", 0, step("first", first), step("second", second))
	Advance(context.Background(), run, at(pipe, 0))
	// A new operator reads the run as written; its compiled pipeline is a new one.
	restarted := run.DeepCopy()
	first2 := script(steps.Fail(false, "must not run again"))
	_, pipe2 := runOf("", 0, step("first", first2), step("second", second))
	Advance(context.Background(), restarted, at(pipe2, time.Minute))
	expect(t, "phases", phases(restarted), "Succeeded first=Succeeded second=Succeeded")
	if first2.calls != 0 {
		t.Error("a step recorded as done was executed again")
	}
}

func TestRejectedAndInvalid(t *testing.T) {
	run, pipe := runOf("", 0, step("a", steps.Nop{}))
	f := at(pipe, 0)
	f.Rejected = errors.New("spec.finalizer is not the policy's")
	Advance(context.Background(), run, f)
	expect(t, "rejected", phases(run), "Failed a=Skipped")
	if c := metaCondition(run, v1alpha1.ConditionFailed); c == nil || c.Reason != v1alpha1.ReasonRejected {
		t.Errorf("Failed condition = %+v", c)
	}
	run, _ = runOf("", 0, step("a", steps.Nop{}))
	Advance(context.Background(), run, Facts{Now: t0, CompileErr: errors.New("spec.pipeline.steps[0].when: bad")})
	if run.Status.Phase != v1alpha1.RunFailed || !strings.Contains(run.Status.Message, "pipeline cannot be compiled: spec.pipeline.steps[0].when") {
		t.Errorf("invalid pipeline: %s %q", run.Status.Phase, run.Status.Message)
	}
}

func TestTargetGone(t *testing.T) {
	run, pipe := runOf("", 0, step("hold", script(steps.Waiting(time.Hour, "holding"))))
	Advance(context.Background(), run, at(pipe, 0))
	f := at(pipe, time.Minute)
	f.TargetGone = true
	Advance(context.Background(), run, f)
	expect(t, "phases", phases(run), "Abandoned hold=Skipped")

	// A failed run whose object someone else deleted ends too: it has nothing left to hold.
	run, pipe = runOf("", 0, step("x", script(steps.Fail(false, "403"))))
	Advance(context.Background(), run, at(pipe, 0))
	Advance(context.Background(), run, f)
	if run.Status.Phase != v1alpha1.RunAbandoned || !strings.Contains(run.Status.Message, "after the run had failed: step x failed: 403") {
		t.Errorf("failed run, object gone: %s %q", run.Status.Phase, run.Status.Message)
	}
}

func metaCondition(run *v1alpha1.TeardownRun, typ string) *metav1.Condition {
	for i := range run.Status.Conditions {
		if run.Status.Conditions[i].Type == typ {
			return &run.Status.Conditions[i]
		}
	}
	return nil
}

// A step whose calls the operator's shutdown cancelled has not failed: the pass that is recorded
// keeps it going, and the steps after it are not touched.
func TestShutdownInterruptsWithoutFailing(t *testing.T) {
	for _, tc := range []struct {
		name, cancel string // when ctx is cancelled: "before" the pass, "during" the step, or "never"
		want         string
	}{
		{"not cancelled: the failure is one", "never", "Failed a=Failed"},
		{"cancelled during the step: its failure is an interruption", "during", "Running a=Running"},
		{"cancelled before the pass: no step is touched", "before", "Running a=Pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a := &cancelling{result: steps.Fail(false, "creating Job x: context canceled")}
			switch tc.cancel {
			case "before":
				cancel()
			case "during":
				a.cancel = cancel
			}
			run, pipe := runOf(v1alpha1.FailurePolicyRetain, 0, step("a", a), step("b", script(steps.Result{Outcome: steps.Succeeded})))
			run.Status.Phase = v1alpha1.RunRunning
			out := Advance(ctx, run, at(pipe, 0))
			expect(t, "phases", phases(run), tc.want)
			if tc.cancel == "during" && (!strings.HasPrefix(run.Status.Steps[0].Message, "interrupted by the operator's shutdown") || out.RequeueAfter != interruptedRecheck) {
				t.Errorf("step a: %q, requeue %s", run.Status.Steps[0].Message, out.RequeueAfter)
			}
		})
	}
}

// cancelling is an action whose call a shutdown may cut short: it cancels ctx (when set) and
// fails.
type cancelling struct {
	cancel func()
	result steps.Result
}

func (c *cancelling) Execute(context.Context, *steps.Input) steps.Result {
	if c.cancel != nil {
		c.cancel()
	}
	return c.result
}
