package pipeline

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// retryRequest answers the retry annotation. It reports whether the run was reset to run again.
// Any request it does not act on is refused with an event; either way the annotation is to be
// removed after the status write (Effects.ClearRetry).
func (p *pass) retryRequest(value string) bool {
	st := &p.run.Status
	p.out.ClearRetry = value
	if p.handled(value) {
		return false // recorded already; only the annotation's removal was lost
	}
	refuse := func(why string) bool {
		p.note(true, v1alpha1.ReasonRetryRefused, "Retry (%s=%q) refused: %s", v1alpha1.AnnotationRetry, value, why)
		return false
	}
	switch {
	case p.f.RetryUntrusted != "":
		return refuse(p.f.RetryUntrusted)
	case !st.Phase.Finished():
		return refuse(fmt.Sprintf("the run is %s, not Failed", phaseOrPending(st.Phase)))
	case st.Phase != v1alpha1.RunFailed:
		return refuse(fmt.Sprintf("the run is %s; only a Failed run can be retried", st.Phase))
	case st.Phase.Releases(p.run.Spec.Pipeline.FailurePolicy):
		return refuse("failurePolicy Release already let the object go")
	case p.f.Rejected != nil:
		return refuse("the run was rejected: " + p.f.Rejected.Error())
	case p.f.TargetGone:
		return refuse("the object is gone")
	case p.f.BreakGlass != "":
		return refuse("the object is being released by " + p.f.BreakGlass)
	case p.twoPhase() && p.f.Requested == "":
		return refuse("the delete request was withdrawn: request the deletion again to start over")
	}
	from := resumeIndex(p.run)
	if from < 0 {
		return refuse("no step failed or was skipped by the failure")
	}
	p.resume(from, value)
	return true
}

// handled reports whether the retry request value was already acted on: the run records the
// request's time, or (time unknown) the run is running again since a retry with that value.
func (p *pass) handled(value string) bool {
	last := p.run.Status.LastRetry
	switch {
	case last == nil || !strings.HasPrefix(last.RequestedBy, quoteRequest(value)):
		return false
	case p.f.RetryAt != nil && last.RequestedAt != nil:
		return last.RequestedAt.Equal(p.f.RetryAt)
	}
	return !p.run.Status.Phase.Finished()
}

func phaseOrPending(ph v1alpha1.RunPhase) v1alpha1.RunPhase {
	if ph == "" {
		return v1alpha1.RunPending
	}
	return ph
}

func quoteRequest(value string) string { return fmt.Sprintf("%q", value) }

// resumeIndex is the step a retry resumes at: the step that failed the pipeline, or else the
// first step the failure skipped (a pipeline that timed out between attempts).
func resumeIndex(run *v1alpha1.TeardownRun) int {
	specs := run.Spec.Pipeline.Steps
	for i, ss := range run.Status.Steps {
		if ss.Phase == v1alpha1.StepFailed && (i >= len(specs) || specs[i].OnFailure != v1alpha1.OnFailureContinue) {
			return i
		}
	}
	for i, ss := range run.Status.Steps {
		if ss.Phase == v1alpha1.StepSkipped && strings.HasPrefix(ss.Message, SkippedPrefix) {
			return i
		}
	}
	return -1
}

// resume resets the run from step index from onward and records the retry.
func (p *pass) resume(from int, value string) {
	st := &p.run.Status
	who := quoteRequest(value)
	if p.f.RetryBy != "" {
		who += ", requested by " + p.f.RetryBy
	}
	failure := p.reset(from, who, p.f.RetryAt)
	st.Message = fmt.Sprintf("retry %d: resuming at step %s", st.Retries, st.Steps[from].Name)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{LastTransitionTime: metav1.NewTime(p.now), Type: v1alpha1.ConditionComplete, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonRunRetried, Message: st.Message, ObservedGeneration: p.run.Generation})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{LastTransitionTime: metav1.NewTime(p.now), Type: v1alpha1.ConditionFailed, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonRunRetried, Message: "retried after: " + failure, ObservedGeneration: p.run.Generation})
	p.note(false, v1alpha1.ReasonRetried, "Teardown retried by %s: resuming at step %s (it had failed: %s)", who, st.Steps[from].Name, failure)
}

// reset makes the run run again from step index from onward, counting and recording it as a
// retry asked by who at at; it returns what the run had ended with. Attempt numbers go on from
// the last one, so a new attempt never finds the Job of an old one under its name.
func (p *pass) reset(from int, who string, at *metav1.Time) (failure string) {
	st := &p.run.Status
	failure = st.Message
	for i := from; i < len(st.Steps); i++ {
		ss := &st.Steps[i]
		*ss = v1alpha1.StepStatus{Name: ss.Name, Phase: v1alpha1.StepPending, Attempts: ss.Attempts}
	}
	st.Retries++
	st.LastRetry = &v1alpha1.RunRetry{Time: metav1.NewTime(p.now), RequestedBy: who, RequestedAt: at, FromStep: st.Steps[from].Name, Failure: failure}
	st.Phase, st.CompletionTime, st.CurrentStep = v1alpha1.RunRunning, nil, st.Steps[from].Name
	if to := p.run.Spec.Pipeline.Timeout; to != nil && to.Duration > 0 {
		d := metav1.NewMicroTime(p.now.Add(to.Duration))
		st.Deadline = &d // the pipeline's bound starts again, or a timed-out run would fail at once
	}
	return failure
}
