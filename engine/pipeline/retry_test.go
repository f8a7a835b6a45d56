package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// failedRun returns a run whose step b failed (c skipped by the failure), and its pipeline with
// b now fixed.
func failedRun(t *testing.T, fp v1alpha1.FailurePolicy) (*v1alpha1.TeardownRun, *scripted, Facts) {
	b := script(steps.Fail(false, "403"), steps.Done("exported"))
	run, pipe := runOf(fp, time.Minute, step("a", steps.Nop{}), step("b", b), step("c", steps.Nop{}))
	Advance(context.Background(), run, at(pipe, 0))
	if run.Status.Phase != v1alpha1.RunFailed {
		t.Fatalf("setup: %s", phases(run))
	}
	f := at(pipe, time.Hour)
	f.Retry, f.RetryBy, f.RetryAt = "alice: fixed", "alice", &metav1.Time{Time: t0.Add(time.Hour)}
	return run, b, f
}

func TestRetryRequest(t *testing.T) {
	tests := []struct {
		name      string
		edit      func(*v1alpha1.TeardownRun, *Facts)
		fp        v1alpha1.FailurePolicy
		want      string // phases after the pass
		wantEvent string
	}{
		{"failed and retaining", nil, "", "Succeeded a=Succeeded b=Succeeded c=Succeeded", "resuming at step b"},
		{"running", func(r *v1alpha1.TeardownRun, _ *Facts) { r.Status.Phase = v1alpha1.RunRunning }, "", "Failed a=Succeeded b=Failed c=Skipped", "the run is Running, not Failed"},
		{"succeeded", func(r *v1alpha1.TeardownRun, _ *Facts) { r.Status.Phase = v1alpha1.RunSucceeded }, "", "", "only a Failed run can be retried"},
		{"released by failurePolicy", nil, v1alpha1.FailurePolicyRelease, "", "already let the object go"},
		{"rejected", func(_ *v1alpha1.TeardownRun, f *Facts) { f.Rejected = errors.New("forged") }, "", "", "the run was rejected: forged"},
		{"object gone", func(_ *v1alpha1.TeardownRun, f *Facts) { f.TargetGone = true }, "", "", "the object is gone"},
		{"being abandoned", func(_ *v1alpha1.TeardownRun, f *Facts) { f.BreakGlass = "bob" }, "", "", "the object is being released by bob"},
		{"not checked by admission", func(_ *v1alpha1.TeardownRun, f *Facts) { f.RetryUntrusted = "the admission policy is not installed" }, "", "",
			"refused: the admission policy is not installed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, _, f := failedRun(t, tt.fp)
			if tt.edit != nil {
				tt.edit(run, &f)
			}
			before := phases(run)
			out := Advance(context.Background(), run, f)
			want := tt.want
			if want == "" {
				want = before
			}
			if tt.name == "object gone" || tt.name == "being abandoned" {
				want = "Abandoned a=Succeeded b=Failed c=Skipped" // afterFinish ends or releases it
			}
			expect(t, "phases", phases(run), want)
			expect(t, "clearRetry", out.ClearRetry, "alice: fixed")
			if !strings.Contains(strings.Join(noteList(out), "\n"), tt.wantEvent) {
				t.Errorf("events %q, want one with %q", noteList(out), tt.wantEvent)
			}
		})
	}
}

func TestRetryResumesWithFreshAttempts(t *testing.T) {
	run, b, f := failedRun(t, "")
	Advance(context.Background(), run, f)
	st := run.Status
	if st.Retries != 1 || st.LastRetry == nil || st.LastRetry.FromStep != "b" || st.LastRetry.Failure != "step b failed: 403" ||
		st.LastRetry.RequestedBy != `"alice: fixed", requested by alice` {
		t.Errorf("retry record = %+v", st.LastRetry)
	}
	if ss := st.Step("b"); ss.Attempts != 2 || ss.FirstAttempt != 2 || b.calls != 2 {
		t.Errorf("step b = %+v after %d calls: attempts go on from the failed one", ss, b.calls)
	}
	if c := metaCondition(run, v1alpha1.ConditionFailed); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonRunRetried {
		t.Errorf("Failed condition = %+v", c)
	}
	// The annotation's removal was lost: the same request is not acted on twice, whatever the phase.
	run.Status.Phase = v1alpha1.RunFailed
	out := Advance(context.Background(), run, f)
	if run.Status.Retries != 1 || len(out.Events) != 0 || out.ClearRetry != "alice: fixed" {
		t.Errorf("a recorded request again: retries %d, events %q", run.Status.Retries, noteList(out))
	}
}

func TestRetryRenewsThePipelineDeadline(t *testing.T) {
	slow := script(steps.Waiting(time.Hour, "slow"), steps.Done("done"))
	run, pipe := runOf("", time.Minute, step("slow", slow))
	Advance(context.Background(), run, at(pipe, 0))
	Advance(context.Background(), run, at(pipe, time.Minute))
	expect(t, "timed out", phases(run), "Failed slow=Failed")
	f := at(pipe, time.Hour)
	f.Retry = "again"
	Advance(context.Background(), run, f)
	expect(t, "retried", phases(run), "Succeeded slow=Succeeded")
	if d := run.Status.Deadline; d == nil || !d.Time.Equal(t0.Add(time.Hour+time.Minute)) {
		t.Errorf("deadline = %v, want a fresh minute from the retry", d)
	}
}

func TestResumeIndex(t *testing.T) {
	run, _, _ := failedRun(t, "")
	if got := resumeIndex(run); got != 1 {
		t.Errorf("resumeIndex = %d, want the failed step", got)
	}
	run.Status.Steps[1] = v1alpha1.StepStatus{Name: "b", Phase: v1alpha1.StepSkipped, Message: SkippedPrefix + "the pipeline timed out"}
	if got := resumeIndex(run); got != 1 {
		t.Errorf("resumeIndex = %d, want the first step the timeout skipped", got)
	}
	run.Status.Steps[1].Message = "when is false: x"
	run.Status.Steps[2] = v1alpha1.StepStatus{Name: "c", Phase: v1alpha1.StepSucceeded}
	if got := resumeIndex(run); got != -1 {
		t.Errorf("resumeIndex = %d, want -1 (a guard's skip is no failure)", got)
	}
}

func TestRoundAttempts(t *testing.T) {
	for _, tt := range []struct{ attempts, first, want int32 }{{1, 0, 1}, {3, 0, 3}, {4, 4, 1}, {6, 4, 3}} {
		if got := roundAttempts(&v1alpha1.StepStatus{Attempts: tt.attempts, FirstAttempt: tt.first}); got != tt.want {
			t.Errorf("roundAttempts(%d from %d) = %d, want %d", tt.attempts, tt.first, got, tt.want)
		}
	}
}

func noteList(out Effects) []string {
	var notes []string
	for _, e := range out.Events {
		notes = append(notes, e.Note)
	}
	return notes
}
