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
	"github.com/teardown-dev/teardown-operator/steps"
)

// notifier is a finally step's action: it records the run phase and ending it ran for.
type notifier struct {
	seen    []string
	endings []int32
	result  steps.Result
}

func (n *notifier) Execute(_ context.Context, in *steps.Input) steps.Result {
	run := in.Vars["run"].(map[string]any)
	n.seen = append(n.seen, run["phase"].(string))
	n.endings = append(n.endings, in.Ending)
	return n.result
}

// withFinally adds finally steps to a pipeline, defaulting their timeout as the compiler does.
func withFinally(run *v1alpha1.TeardownRun, pipe *policy.Pipeline, fs ...*policy.Step) {
	addBounded(&run.Spec.Pipeline.Finally, &pipe.Finally, fs)
}

// addBounded adds steps to a list of the run's spec and of its compiled pipeline, their timeout
// defaulted as the compiler does for finally and onStuck steps.
func addBounded(specs *[]v1alpha1.Step, compiled *[]*policy.Step, fs []*policy.Step) {
	for _, f := range fs {
		if f.Spec.Timeout == nil {
			f.Spec.Timeout = &metav1.Duration{Duration: policy.DefaultFinallyTimeout}
		}
		*specs = append(*specs, f.Spec)
		*compiled = append(*compiled, f)
	}
}

func finallyPhases(run *v1alpha1.TeardownRun) string {
	var b []string
	for _, s := range run.Status.Finally {
		b = append(b, s.Name+"="+string(s.Phase))
	}
	return strings.Join(b, " ")
}

// Finally steps run on every ending, see it in run.phase, and never change it: a failed one is
// recorded and the next runs.
func TestFinallyOnEachEnding(t *testing.T) {
	tests := map[string]struct {
		main  steps.Result
		facts func(*Facts)
		phase v1alpha1.RunPhase
	}{
		"succeeded":   {main: steps.Done("ok"), phase: v1alpha1.RunSucceeded},
		"failed":      {main: steps.Fail(false, "boom"), phase: v1alpha1.RunFailed},
		"break glass": {main: steps.Waiting(time.Minute, "slow"), facts: func(f *Facts) { f.BreakGlass = "alice" }, phase: v1alpha1.RunAbandoned},
		"timed out":   {main: steps.Waiting(time.Minute, "slow"), facts: func(f *Facts) { f.Now = f.Now.Add(2 * time.Hour) }, phase: v1alpha1.RunFailed},
		"target gone": {main: steps.Waiting(time.Minute, "slow"), facts: func(f *Facts) { f.TargetGone = true }, phase: v1alpha1.RunAbandoned},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			broken := &notifier{result: steps.Fail(false, "webhook down")}
			chat := &notifier{result: steps.Done("sent")}
			run, pipe := runOf(v1alpha1.FailurePolicyRetain, time.Hour, step("work", script(tt.main)))
			withFinally(run, pipe, step("broken", broken), step("chat", chat))
			Advance(context.Background(), run, at(pipe, 0)) // the first pass starts the work
			f := at(pipe, time.Second)
			if tt.facts != nil {
				tt.facts(&f)
			}
			Advance(context.Background(), run, f)
			if run.Status.Phase != tt.phase || run.Status.Ending != nil {
				t.Fatalf("phase %s, ending %+v; want %s and no ending left", run.Status.Phase, run.Status.Ending, tt.phase)
			}
			if strings.Join(chat.seen, ",") != string(tt.phase) || len(broken.seen) != 1 || chat.endings[0] != 1 {
				t.Errorf("finally steps saw %v / %v (endings %v); want each once, phase %s, ending 1", broken.seen, chat.seen, chat.endings, tt.phase)
			}
			expect(t, "finally", finallyPhases(run), "broken=Failed chat=Succeeded")
			if !strings.Contains(run.Status.Message, "; finally step broken failed: webhook down") {
				t.Errorf("message %q does not say the finally step failed", run.Status.Message)
			}
		})
	}
}

// While a finally step waits, the run stays Running with its ending recorded: its object is held
// (for the finally step's timeout at most), break glass does not start another ending, and the
// run then ends as recorded.
func TestFinallyHoldsUntilItsTimeout(t *testing.T) {
	slow := &notifier{result: steps.Waiting(time.Minute, "no answer yet")}
	run, pipe := runOf(v1alpha1.FailurePolicyRetain, 0, step("work", script(steps.Done("ok"))))
	withFinally(run, pipe, step("slow", slow, func(s *v1alpha1.Step) { s.Timeout = &metav1.Duration{Duration: 2 * time.Minute} }))
	out := Advance(context.Background(), run, at(pipe, 0))
	if run.Status.Phase != v1alpha1.RunRunning || run.Status.Ending == nil || run.Status.Ending.Phase != v1alpha1.RunSucceeded || out.RequeueAfter != time.Minute {
		t.Fatalf("phase %s ending %+v requeue %s", run.Status.Phase, run.Status.Ending, out.RequeueAfter)
	}
	f := at(pipe, time.Minute)
	f.BreakGlass = "alice"
	Advance(context.Background(), run, f)
	if run.Status.Phase != v1alpha1.RunRunning || run.Status.Endings != 1 {
		t.Fatalf("break glass during finally: phase %s, endings %d", run.Status.Phase, run.Status.Endings)
	}
	Advance(context.Background(), run, at(pipe, 3*time.Minute))
	expect(t, "after the finally step's timeout", string(run.Status.Phase), "Succeeded")
	if ss := run.Status.Step("slow"); ss.Phase != v1alpha1.StepFailed || !strings.HasPrefix(ss.Message, "timed out after 2m0s") {
		t.Errorf("slow: %s %q", ss.Phase, ss.Message)
	}
}

// A Failed run that keeps its object ends again when someone breaks glass: its finally steps run
// again, for ending 2, with their attempts counted on.
func TestFinallyRunsAgainOnALaterEnding(t *testing.T) {
	chat := &notifier{result: steps.Done("sent")}
	run, pipe := runOf(v1alpha1.FailurePolicyRetain, 0, step("work", script(steps.Fail(false, "boom"))))
	withFinally(run, pipe, step("chat", chat))
	Advance(context.Background(), run, at(pipe, 0))
	expect(t, "first ending", string(run.Status.Phase), "Failed")
	f := at(pipe, time.Minute)
	f.BreakGlass = "alice"
	Advance(context.Background(), run, f)
	expect(t, "second ending", string(run.Status.Phase), "Abandoned")
	if strings.Join(chat.seen, ",") != "Failed,Abandoned" || chat.endings[1] != 2 || run.Status.Endings != 2 || run.Status.Step("chat").Attempts != 2 {
		t.Errorf("chat saw %v endings %v; run endings %d, attempts %d", chat.seen, chat.endings, run.Status.Endings, run.Status.Step("chat").Attempts)
	}
}

// A finally step that needs its run recorded (a Job) stops the first pass, as any such step does.
func TestFinallyWaitsForTheRunToBeRecorded(t *testing.T) {
	job := &notifier{result: steps.Done("ran")}
	run, pipe := runOf(v1alpha1.FailurePolicyRetain, 0, step("work", script(steps.Done("ok"))))
	needs := step("job", job)
	needs.NeedsRun = true
	withFinally(run, pipe, needs)
	f := at(pipe, 0)
	f.Unborn = true
	Advance(context.Background(), run, f)
	if run.Status.Phase != v1alpha1.RunRunning || len(job.seen) != 0 {
		t.Fatalf("unborn: phase %s, job ran %d times", run.Status.Phase, len(job.seen))
	}
	Advance(context.Background(), run, at(pipe, time.Second))
	if run.Status.Phase != v1alpha1.RunSucceeded || len(job.seen) != 1 {
		t.Errorf("recorded: phase %s, job ran %d times", run.Status.Phase, len(job.seen))
	}
}

// A two-phase run whose request is withdrawn ends Cancelled, and its finally steps say so.
func TestFinallyOnCancel(t *testing.T) {
	chat := &notifier{result: steps.Done("sent")}
	run, pipe := runOf(v1alpha1.FailurePolicyRetain, 0, step("work", script(steps.Waiting(time.Minute, "slow"))))
	run.Spec.Trigger = v1alpha1.TriggerDeleteRequest
	withFinally(run, pipe, step("chat", chat))
	f := at(pipe, 0)
	f.Requested = "alice: retire it"
	Advance(context.Background(), run, f)
	Advance(context.Background(), run, at(pipe, time.Second)) // the request is gone
	if run.Status.Phase != v1alpha1.RunCancelled || strings.Join(chat.seen, ",") != "Cancelled" {
		t.Errorf("phase %s, chat saw %v", run.Status.Phase, chat.seen)
	}
}

// A run found untrusted while its finally steps run drops the ending it had recorded: trusted
// again, it does not end as that ending said.
func TestRejectedRunDropsItsEnding(t *testing.T) {
	slow := &notifier{result: steps.Waiting(time.Minute, "sending")}
	run, pipe := runOf(v1alpha1.FailurePolicyRetain, 0, step("work", script(steps.Done("ok"))))
	withFinally(run, pipe, step("slow", slow))
	Advance(context.Background(), run, at(pipe, 0))
	f := at(pipe, time.Second)
	f.Rejected = errors.New("status written by someone else")
	Advance(context.Background(), run, f)
	if run.Status.Phase != v1alpha1.RunFailed || run.Status.Ending != nil || run.Status.Step("slow").Phase != v1alpha1.StepSkipped {
		t.Fatalf("rejected: phase %s ending %+v slow %s", run.Status.Phase, run.Status.Ending, run.Status.Step("slow").Phase)
	}
	Advance(context.Background(), run, at(pipe, 2*time.Second))
	if run.Status.Phase == v1alpha1.RunSucceeded {
		t.Errorf("the void ending came back: %s", run.Status.Message)
	}
}
