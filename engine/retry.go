package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// AnnotationRetry on a Failed run that keeps its object resumes the pipeline at the step that
// failed, with fresh attempts. The value should say who asks and why; it is recorded in the run.
// The operator removes the annotation once the retry is recorded.
const AnnotationRetry = "teardown.dev/retry"

// ConditionFailed is True on a run whose pipeline failed; it stays True if the run is then
// abandoned, so the failure does not disappear from view.
const ConditionFailed = "Failed"

// Reasons of the Failed condition.
const (
	reasonStepFailed       = "StepFailed"
	reasonPipelineTimedOut = "PipelineTimedOut"
	reasonRejected         = "Rejected"
	reasonInvalidPipeline  = "InvalidPipeline"
	reasonRetried          = "Retried"
)

// retryRequest handles the retry annotation. It reports whether the run was reset to run again.
// Any request it does not act on is refused with an event; either way the annotation is removed
// after the status write (clearRetry).
func (p *pass) retryRequest(value string) bool {
	st := &p.run.Status
	p.clearRetry = value
	if last := st.LastRetry; last != nil && strings.HasPrefix(last.RequestedBy, quoteRequest(value)) && !st.Phase.Finished() {
		return false // recorded already; only the annotation's removal was lost
	}
	refuse := func(why string) bool {
		p.note(true, ReasonRetryRefused, "Retry (%s=%q) refused: %s", AnnotationRetry, value, why)
		return false
	}
	switch {
	case !st.Phase.Finished():
		return refuse(fmt.Sprintf("the run is %s, not Failed", phaseOrPending(st.Phase)))
	case st.Phase != v1alpha1.RunFailed:
		return refuse(fmt.Sprintf("the run is %s; only a Failed run can be retried", st.Phase))
	case st.Phase.Releases(p.run.Spec.Pipeline.FailurePolicy):
		return refuse("failurePolicy Release already let the object go")
	case p.e.trusted(p.run) != nil:
		return refuse("the run was rejected: " + p.e.trusted(p.run).Error())
	case p.target == nil:
		return refuse("the object is gone")
	}
	from := resumeIndex(p.run)
	if from < 0 {
		return refuse("no step failed or was skipped by the failure")
	}
	p.resume(from, value)
	return true
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
		if ss.Phase == v1alpha1.StepSkipped && strings.HasPrefix(ss.Message, skippedPrefix) {
			return i
		}
	}
	return -1
}

// resume resets the run from step index from onward and records the retry. Attempt numbers go
// on from the last one, so a new attempt never finds the Job of an old one under its name.
func (p *pass) resume(from int, value string) {
	st := &p.run.Status
	failure := st.Message
	for i := from; i < len(st.Steps); i++ {
		ss := &st.Steps[i]
		*ss = v1alpha1.StepStatus{Name: ss.Name, Phase: v1alpha1.StepPending, Attempts: ss.Attempts}
	}
	who := quoteRequest(value)
	if m := policy.ManagerOf(p.orig, "f:metadata", "f:annotations", "f:"+AnnotationRetry); m != "" {
		who += ", set by field manager " + m
	}
	now := metav1.NewTime(p.now)
	st.Retries++
	st.LastRetry = &v1alpha1.RunRetry{Time: now, RequestedBy: who, FromStep: st.Steps[from].Name, Failure: failure}
	st.Phase, st.CompletionTime, st.CurrentStep = v1alpha1.RunRunning, nil, st.Steps[from].Name
	st.Message = fmt.Sprintf("retry %d: resuming at step %s", st.Retries, st.Steps[from].Name)
	if to := p.run.Spec.Pipeline.Timeout; to != nil && to.Duration > 0 {
		d := metav1.NewMicroTime(p.now.Add(to.Duration))
		st.Deadline = &d // the pipeline's bound starts again, or a timed-out run would fail at once
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionComplete, Status: metav1.ConditionFalse,
		Reason: reasonRetried, Message: st.Message, ObservedGeneration: p.run.Generation})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionFailed, Status: metav1.ConditionFalse,
		Reason: reasonRetried, Message: "retried after: " + failure, ObservedGeneration: p.run.Generation})
	p.note(false, ReasonRetried, "Teardown retried by %s: resuming at step %s (it had failed: %s)", who, st.Steps[from].Name, failure)
}

// clearRetryAnnotation removes the retry annotation once the pass that handled it is written, if
// it still holds the value handled (a newer request stays for the next pass).
func (r *runReconciler) clearRetryAnnotation(ctx context.Context, run *v1alpha1.TeardownRun, value string) error {
	if run.Annotations[AnnotationRetry] != value {
		return nil
	}
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(AnnotationRetry, "~", "~0"), "/", "~1")
	ops := []map[string]any{
		{"op": "test", "path": path, "value": value},
		{"op": "remove", "path": path},
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	out := run.DeepCopy()
	if err := r.client.Patch(ctx, out, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return fmt.Errorf("removing annotation %s: %w", AnnotationRetry, err)
	}
	r.written.set(client.ObjectKeyFromObject(run), out.ResourceVersion)
	return nil
}

// setFailed records why a run failed in its Failed condition.
func (p *pass) setFailed(reason, msg string) {
	meta.SetStatusCondition(&p.run.Status.Conditions, metav1.Condition{Type: ConditionFailed, Status: metav1.ConditionTrue,
		Reason: reason, Message: msg, ObservedGeneration: p.run.Generation})
}
