package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/steps"
)

// needsRun marks a compiled step as one that cannot start before its run is recorded.
func needsRun(s *policy.Step) *policy.Step { s.NeedsRun = true; return s }

// An unborn run's first pass runs the steps that need no record and stops before one that does,
// without evaluating its guard or counting an attempt; the pass of the recorded run starts it.
func TestUnbornRunStopsBeforeAStepThatNeedsItsRun(t *testing.T) {
	job := script(steps.Waiting(time.Second, "job running"))
	cases := []struct {
		name       string
		steps      []*policy.Step
		wantNeeds  bool
		wantPhases string
		wantEvents string
	}{
		{"instant steps end the pass", []*policy.Step{step("a", steps.Nop{}), step("b", steps.Nop{})},
			false, "Succeeded a=Succeeded b=Succeeded", "TeardownSucceeded"},
		{"a job step first", []*policy.Step{needsRun(step("job", job)), step("after", steps.Nop{})},
			true, "Running job=Pending after=Pending", "TeardownStarted"},
		{"a job step after an instant one", []*policy.Step{step("first", steps.Nop{}), needsRun(step("job", job))},
			true, "Running first=Succeeded job=Pending", "TeardownStarted,StepSucceeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job.calls = 0
			run, pipe := runOf("", 0, tc.steps...)
			f := at(pipe, 0)
			f.Unborn = true
			out := Advance(context.Background(), run, f)
			expect(t, "phases", phases(run), tc.wantPhases)
			expect(t, "events", reasons(out), tc.wantEvents)
			if job.calls != 0 || out.RequeueAfter != 0 {
				t.Fatalf("job executed %d times, requeue after %s: the unborn pass must stop before it, to be passed again once recorded", job.calls, out.RequeueAfter)
			}
			if !tc.wantNeeds {
				return
			}
			// Recorded, the run passes again and starts the step where the first pass stopped.
			out = Advance(context.Background(), run, at(pipe, time.Millisecond))
			if job.calls != 1 || run.Status.Step("job").Attempts != 1 {
				t.Errorf("the recorded run's pass: job executed %d times, status %+v", job.calls, run.Status.Step("job"))
			}
			expect(t, "second pass events", reasons(out), "StepStarted")
		})
	}
}
