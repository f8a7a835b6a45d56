package engine

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// failedRun is a run of a TeardownPolicy whose step b failed (c was skipped by the failure).
func failedRun() *v1alpha1.TeardownRun {
	start := metav1.NewTime(time.Unix(1000, 0))
	return &v1alpha1.TeardownRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"},
		Spec: v1alpha1.TeardownRunSpec{
			PolicyRef: v1alpha1.PolicyReference{Kind: "TeardownPolicy", Namespace: "ns", Name: "p"},
			Target:    v1alpha1.TargetObjectReference{Namespace: "ns", Name: "t"},
			Finalizer: "teardownpolicy.teardown.dev/p",
			Pipeline: v1alpha1.Pipeline{Timeout: &metav1.Duration{Duration: time.Minute}, Steps: []v1alpha1.Step{
				{Name: "a"}, {Name: "b"}, {Name: "c"},
			}},
		},
		Status: v1alpha1.TeardownRunStatus{
			Phase: v1alpha1.RunFailed, Message: "step b failed: 403", CompletionTime: &start,
			Steps: []v1alpha1.StepStatus{
				{Name: "a", Phase: v1alpha1.StepSucceeded, Attempts: 1},
				{Name: "b", Phase: v1alpha1.StepFailed, Attempts: 3, Message: "403", State: map[string]string{"job": "x"}},
				{Name: "c", Phase: v1alpha1.StepSkipped, Message: skippedPrefix + "step b failed"},
			},
		},
	}
}

func TestRetryRequest(t *testing.T) {
	now := time.Unix(2000, 0)
	tests := []struct {
		name       string
		mutate     func(*v1alpha1.TeardownRun)
		noTarget   bool
		wantResume bool
		wantEvent  string // part of the event note
	}{
		{"failed and retaining", nil, false, true, "resuming at step b"},
		{"running", func(r *v1alpha1.TeardownRun) { r.Status.Phase = v1alpha1.RunRunning }, false, false, "the run is Running, not Failed"},
		{"pending", func(r *v1alpha1.TeardownRun) { r.Status.Phase = "" }, false, false, "the run is Pending, not Failed"},
		{"succeeded", func(r *v1alpha1.TeardownRun) { r.Status.Phase = v1alpha1.RunSucceeded }, false, false, "only a Failed run can be retried"},
		{"released by failurePolicy", func(r *v1alpha1.TeardownRun) { r.Spec.Pipeline.FailurePolicy = v1alpha1.FailurePolicyRelease }, false, false, "already let the object go"},
		{"rejected", func(r *v1alpha1.TeardownRun) { r.Spec.Finalizer = "example.com/other" }, false, false, "the run was rejected"},
		{"object gone", nil, true, false, "the object is gone"},
		{"nothing failed", func(r *v1alpha1.TeardownRun) {
			r.Status.Steps[1].Phase, r.Status.Steps[2].Phase = v1alpha1.StepSucceeded, v1alpha1.StepSucceeded
		}, false, false, "no step failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := failedRun()
			if tt.mutate != nil {
				tt.mutate(run)
			}
			p := &pass{e: &Engine{opts: Options{RunNamespace: "teardown-system"}}, orig: run.DeepCopy(), run: run, now: now}
			if !tt.noTarget {
				p.target = &metav1.PartialObjectMetadata{}
			}
			got := p.retryRequest("alice: fixed")
			if got != tt.wantResume {
				t.Fatalf("retryRequest = %v, want %v", got, tt.wantResume)
			}
			if p.clearRetry != "alice: fixed" {
				t.Errorf("the annotation must be removed after any answer; clearRetry = %q", p.clearRetry)
			}
			if len(p.events) != 1 || !strings.Contains(p.events[0].note, tt.wantEvent) {
				t.Errorf("events = %+v, want one with %q", p.events, tt.wantEvent)
			}
		})
	}
}

func TestResumeResetsFromTheFailedStep(t *testing.T) {
	run := failedRun()
	now := time.Unix(2000, 0)
	p := &pass{e: &Engine{opts: Options{RunNamespace: "teardown-system"}}, orig: run.DeepCopy(), run: run, now: now, target: &metav1.PartialObjectMetadata{}}
	if !p.retryRequest("alice") {
		t.Fatal("not resumed")
	}
	st := run.Status
	if st.Phase != v1alpha1.RunRunning || st.CompletionTime != nil || st.CurrentStep != "b" || st.Retries != 1 {
		t.Errorf("status = %+v", st)
	}
	if a := st.Step("a"); a.Phase != v1alpha1.StepSucceeded || a.Attempts != 1 {
		t.Errorf("step a = %+v, want untouched", a)
	}
	if b := st.Step("b"); b.Phase != v1alpha1.StepPending || b.Attempts != 3 || b.State != nil || b.Message != "" {
		t.Errorf("step b = %+v, want Pending with its attempt count kept and the rest cleared", b)
	}
	if c := st.Step("c"); c.Phase != v1alpha1.StepPending {
		t.Errorf("step c = %+v, want Pending", c)
	}
	if st.Deadline == nil || !st.Deadline.Time.Equal(now.Add(time.Minute)) {
		t.Errorf("deadline = %v, want a fresh pipeline timeout from now", st.Deadline)
	}
	if st.LastRetry == nil || st.LastRetry.FromStep != "b" || st.LastRetry.Failure != "step b failed: 403" || !strings.Contains(st.LastRetry.RequestedBy, `"alice"`) {
		t.Errorf("lastRetry = %+v", st.LastRetry)
	}
	// The request recorded, a lost annotation removal must not be refused or applied twice.
	p2 := &pass{e: p.e, orig: run.DeepCopy(), run: run.DeepCopy(), now: now, target: &metav1.PartialObjectMetadata{}}
	if p2.retryRequest("alice") || len(p2.events) != 0 || p2.clearRetry != "alice" {
		t.Errorf("second look at a recorded request: events %+v", p2.events)
	}
}

func TestResumeIndex(t *testing.T) {
	run := failedRun()
	if got := resumeIndex(run); got != 1 {
		t.Errorf("resumeIndex = %d, want the failed step", got)
	}
	// A step that failed with onFailure Continue did not stop the pipeline: not the one to resume.
	run.Spec.Pipeline.Steps[0].OnFailure = v1alpha1.OnFailureContinue
	run.Status.Steps[0].Phase = v1alpha1.StepFailed
	if got := resumeIndex(run); got != 1 {
		t.Errorf("resumeIndex = %d, want 1", got)
	}
	// Timed out between attempts: nothing failed, the rest was skipped.
	run.Status.Steps[1] = v1alpha1.StepStatus{Name: "b", Phase: v1alpha1.StepSkipped, Message: skippedPrefix + "the pipeline timed out"}
	if got := resumeIndex(run); got != 1 {
		t.Errorf("resumeIndex = %d, want the first step the timeout skipped", got)
	}
	// A step skipped by its guard is not a failure.
	run.Status.Steps[1].Message = "when is false: x"
	run.Status.Steps[2].Phase, run.Status.Steps[2].Message = v1alpha1.StepSucceeded, ""
	if got := resumeIndex(run); got != -1 {
		t.Errorf("resumeIndex = %d, want -1", got)
	}
}

func TestRoundAttempts(t *testing.T) {
	for _, tt := range []struct{ attempts, first, want int32 }{{1, 0, 1}, {3, 0, 3}, {4, 4, 1}, {6, 4, 3}} {
		if got := roundAttempts(&v1alpha1.StepStatus{Attempts: tt.attempts, FirstAttempt: tt.first}); got != tt.want {
			t.Errorf("roundAttempts(%d from %d) = %d, want %d", tt.attempts, tt.first, got, tt.want)
		}
	}
}
