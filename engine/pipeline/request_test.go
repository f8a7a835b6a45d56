package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// twoPhaseRun returns a DeleteRequest run whose first step is done and whose second waits.
func twoPhaseRun(t *testing.T, fp v1alpha1.FailurePolicy) (*v1alpha1.TeardownRun, Facts) {
	run, pipe := runOf(fp, 0, step("backup", steps.Nop{}), step("settle", script(steps.Waiting(time.Minute, "settling"))))
	run.Spec.Trigger = v1alpha1.TriggerDeleteRequest
	f := at(pipe, 0)
	f.Requested = `annotation teardown.dev/delete-requested="alice: done"`
	Advance(context.Background(), run, f)
	if got := phases(run); got != "Running backup=Succeeded settle=Running" {
		t.Fatalf("setup: %s", got)
	}
	if run.Status.RequestedBy != f.Requested {
		t.Fatalf("requestedBy = %q", run.Status.RequestedBy)
	}
	return run, at(pipe, time.Second)
}

func TestTwoPhase(t *testing.T) {
	const request = "annotation teardown.dev/delete-requested=\"bob: again\""
	tests := []struct {
		name  string
		edit  func(*v1alpha1.TeardownRun, *Facts)
		then  func(*Facts) // facts of a second pass, if any
		want  string       // phases after the passes
		event string       // reason of the last pass's last event
		by    string       // cancelledBy
	}{
		{name: "request still there", edit: func(_ *v1alpha1.TeardownRun, f *Facts) { f.Requested = "x" },
			want: "Running backup=Succeeded settle=Running"},
		{name: "withdrawn while running", want: "Cancelled backup=Succeeded settle=Skipped", event: v1alpha1.ReasonCancelled, by: Withdrawn},
		{name: "withdrawn after failing", edit: func(r *v1alpha1.TeardownRun, _ *Facts) {
			r.Status.Phase, r.Status.Message = v1alpha1.RunFailed, "step settle failed"
			r.Status.Steps[1].Phase = v1alpha1.StepFailed
		}, want: "Cancelled backup=Succeeded settle=Failed", event: v1alpha1.ReasonCancelled, by: Withdrawn},
		{name: "object gone: not a withdrawal", edit: func(_ *v1alpha1.TeardownRun, f *Facts) { f.TargetGone = true },
			want: "Abandoned backup=Succeeded settle=Skipped", event: v1alpha1.ReasonAbandoned},
		{name: "break glass on the live object cancels", edit: func(_ *v1alpha1.TeardownRun, f *Facts) { f.BreakGlass, f.Requested = "carol", "x" },
			want: "Cancelled backup=Succeeded settle=Skipped", event: v1alpha1.ReasonCancelled, by: "break glass: carol"},
		{name: "break glass once the object is being deleted abandons", edit: func(_ *v1alpha1.TeardownRun, f *Facts) {
			f.BreakGlass, f.Requested, f.TargetDeleting = "carol", "the deletion of the object", true
		}, want: "Abandoned backup=Succeeded settle=Skipped", event: v1alpha1.ReasonAbandoned},
		{name: "a new request starts over", then: func(f *Facts) { f.Requested = request },
			want: "Running backup=Succeeded settle=Running", event: v1alpha1.ReasonStepStarted},
		{name: "cancelled, then deleted after break glass", edit: func(_ *v1alpha1.TeardownRun, f *Facts) { f.BreakGlass, f.Requested = "carol", "x" },
			then: func(f *Facts) {
				f.BreakGlass, f.Requested, f.TargetDeleting = "carol", "the deletion of the object", true
			},
			want: "Abandoned backup=Succeeded settle=Skipped", event: v1alpha1.ReasonAbandoned, by: "break glass: carol"},
		{name: "cancelled, object gone: stays cancelled", then: func(f *Facts) { f.TargetGone = true },
			want: "Cancelled backup=Succeeded settle=Skipped", by: Withdrawn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, f := twoPhaseRun(t, "")
			if tt.edit != nil {
				tt.edit(run, &f)
			}
			out := Advance(context.Background(), run, f)
			if tt.then != nil {
				f = at(f.Pipeline, 2*time.Second)
				tt.then(&f)
				out = Advance(context.Background(), run, f)
			}
			expect(t, "phases", phases(run), tt.want)
			expect(t, "cancelledBy", run.Status.CancelledBy, tt.by)
			if tt.event != "" {
				expect(t, "last event", out.Events[len(out.Events)-1].Reason, tt.event)
			}
		})
	}
}

// A new request after a cancellation runs every step again, as a retry: fresh attempts, so fresh
// Idempotency-Keys and Job names, and the request recorded.
func TestTwoPhaseRestartRunsEveryStepAgain(t *testing.T) {
	backup := script(steps.Done("backed up"))
	run, pipe := runOf("", 0, step("backup", backup), step("settle", script(steps.Waiting(time.Minute, "settling"))))
	run.Spec.Trigger = v1alpha1.TriggerDeleteRequest
	f := at(pipe, 0)
	f.Requested = "first"
	Advance(context.Background(), run, f)
	f = at(pipe, time.Second) // withdrawn
	Advance(context.Background(), run, f)
	expect(t, "phases", phases(run), "Cancelled backup=Succeeded settle=Skipped")
	f = at(pipe, 2*time.Second)
	f.Requested = "second"
	out := Advance(context.Background(), run, f)
	expect(t, "phases", phases(run), "Running backup=Succeeded settle=Running")
	st := run.Status
	if backup.calls != 2 || st.Step("backup").Attempts != 2 || st.Retries != 1 || st.RequestedBy != "second" || st.CancelledBy != "" {
		t.Errorf("after the new request: backup called %d times, status %+v", backup.calls, st)
	}
	if st.LastRetry == nil || st.LastRetry.FromStep != "backup" || st.LastRetry.RequestedBy != "second" {
		t.Errorf("lastRetry = %+v", st.LastRetry)
	}
	if !strings.Contains(reasons(out), v1alpha1.ReasonDeleteRequested) {
		t.Errorf("events %s, want %s", reasons(out), v1alpha1.ReasonDeleteRequested)
	}
}

// A two-phase run that succeeds says the operator deletes the object; one that fails says the
// object stays; a retry asked once the request is withdrawn is refused, and the run cancelled.
func TestTwoPhaseEndAndRetry(t *testing.T) {
	run, pipe := runOf("", 0, step("backup", steps.Nop{}))
	run.Spec.Trigger = v1alpha1.TriggerDeleteRequest
	f := at(pipe, 0)
	f.Requested = "alice"
	out := Advance(context.Background(), run, f)
	expect(t, "phases", phases(run), "Succeeded backup=Succeeded")
	if n := noteList(out); len(n) != 1 || !strings.Contains(n[0], "the operator deletes the object, as requested by alice") {
		t.Errorf("events %q", n)
	}

	failing, pipe := runOf("", 0, step("backup", script(steps.Fail(false, "503"))))
	failing.Spec.Trigger = v1alpha1.TriggerDeleteRequest
	f = at(pipe, 0)
	f.Requested = "alice"
	out = Advance(context.Background(), failing, f)
	expect(t, "phases", phases(failing), "Failed backup=Failed")
	if n := noteList(out); !strings.Contains(strings.Join(n, "\n"), "the object stays as it was, not deleted") {
		t.Errorf("events %q", n)
	}
	f = at(pipe, time.Second)
	f.Retry = "bob: fixed" // and the request withdrawn
	out = Advance(context.Background(), failing, f)
	expect(t, "phases", phases(failing), "Cancelled backup=Failed")
	expect(t, "events", reasons(out), v1alpha1.ReasonRetryRefused+","+v1alpha1.ReasonCancelled)
}
