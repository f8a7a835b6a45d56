package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/steps"
)

func withOnStuck(run *v1alpha1.TeardownRun, pipe *policy.Pipeline, fs ...*policy.Step) {
	addBounded(&run.Spec.Pipeline.OnStuck, &pipe.OnStuck, fs)
}

// A run in flight asks to come back when it becomes stuck, then runs its onStuck steps once,
// beside its pipeline, which goes on; and a warning says so.
func TestOnStuckFiresOnceWhileInFlight(t *testing.T) {
	page := &notifier{result: steps.Done("paged")}
	run, pipe := runOf(v1alpha1.FailurePolicyRetain, 0, step("wait", script(steps.Waiting(time.Hour, "waiting for a DBA"))))
	withOnStuck(run, pipe, step("page", page))
	stuckAt := t0.Add(15 * time.Minute)
	facts := func(d time.Duration) Facts { f := at(pipe, d); f.StuckAt = stuckAt; return f }

	out := Advance(context.Background(), run, facts(0))
	if out.RequeueAfter != 15*time.Minute || len(page.seen) != 0 {
		t.Fatalf("requeue %s, paged %d times; want to come back at the crossing", out.RequeueAfter, len(page.seen))
	}
	out = Advance(context.Background(), run, facts(15*time.Minute))
	if len(page.seen) != 1 || page.seen[0] != "Running" || run.Status.StuckTime == nil || run.Status.CurrentStep != "wait" {
		t.Fatalf("paged %v, stuck %v, current %s", page.seen, run.Status.StuckTime, run.Status.CurrentStep)
	}
	if !strings.Contains(reasons(out), v1alpha1.ReasonRunStuck) {
		t.Errorf("events %s lack %s", reasons(out), v1alpha1.ReasonRunStuck)
	}
	Advance(context.Background(), run, facts(20*time.Minute))
	if len(page.seen) != 1 || run.Status.Phase != v1alpha1.RunRunning {
		t.Errorf("paged %d times, phase %s: want once, the pipeline going on", len(page.seen), run.Status.Phase)
	}
}

// A failed run that keeps its object becomes stuck too; a run that ends first never runs them,
// and one that ends while they run skips the rest.
func TestOnStuckOnAFailedRunAndEndings(t *testing.T) {
	page := &notifier{result: steps.Done("paged")}
	run, pipe := runOf(v1alpha1.FailurePolicyRetain, 0, step("work", script(steps.Fail(false, "boom"))))
	withOnStuck(run, pipe, step("page", page))
	f := at(pipe, 0)
	f.StuckAt = t0.Add(time.Minute)
	out := Advance(context.Background(), run, f)
	if run.Status.Phase != v1alpha1.RunFailed || out.RequeueAfter != time.Minute {
		t.Fatalf("phase %s, requeue %s", run.Status.Phase, out.RequeueAfter)
	}
	f.Now = t0.Add(time.Minute)
	Advance(context.Background(), run, f)
	if strings.Join(page.seen, ",") != "Failed" {
		t.Errorf("paged %v, want once, for the Failed run", page.seen)
	}

	slow := &notifier{result: steps.Waiting(time.Minute, "paging")}
	run, pipe = runOf(v1alpha1.FailurePolicyRetain, 0, step("work", script(steps.Waiting(time.Hour, "slow"), steps.Done("done"))))
	withOnStuck(run, pipe, step("page", slow))
	f = at(pipe, 0)
	f.StuckAt = t0
	Advance(context.Background(), run, f)
	f.Now = t0.Add(2 * time.Hour)
	Advance(context.Background(), run, f)
	if ss := run.Status.Step("page"); run.Status.Phase != v1alpha1.RunSucceeded || ss.Phase != v1alpha1.StepSkipped || !strings.Contains(ss.Message, "the run ended") {
		t.Errorf("phase %s, page %s %q", run.Status.Phase, ss.Phase, ss.Message)
	}
}
