package pipeline

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// Withdrawn is the CancelledBy of a run whose delete request was withdrawn.
const Withdrawn = "the delete request was withdrawn (annotation " + v1alpha1.AnnotationDeleteRequested + " removed)"

// twoPhase reports whether the run executes before the DELETE (trigger DeleteRequest): its
// object is alive until the pipeline succeeds, and its delete request may be withdrawn.
func (p *pass) twoPhase() bool {
	return p.run.Spec.Trigger == v1alpha1.TriggerDeleteRequest
}

// withdrawn reports whether a two-phase run's request is gone while the run could still delete
// its object: it is cancelled. Break glass and a rejected run go their own ways.
func (p *pass) withdrawn() bool {
	st := p.run.Status
	if !p.twoPhase() || p.f.Requested != "" || p.f.TargetGone || p.f.Rejected != nil || p.f.BreakGlass != "" {
		return false
	}
	return !st.Phase.Finished() || st.Phase == v1alpha1.RunFailed && !st.Phase.Releases(p.run.Spec.Pipeline.FailurePolicy)
}

// rerequested reports whether a cancelled two-phase run's deletion is requested again.
func (p *pass) rerequested() bool {
	return p.twoPhase() && p.run.Status.Phase == v1alpha1.RunCancelled && p.f.Requested != "" &&
		!p.f.TargetGone && p.f.Rejected == nil && p.f.BreakGlass == ""
}

// cancel ends a two-phase run whose request was withdrawn, or on whose object someone broke
// glass (which lifts the veto, so that a plain delete goes through): the steps not done are
// skipped (an attempt in flight is let go), and the object stays as it is.
func (p *pass) cancel(why string) {
	st := &p.run.Status
	st.CancelledBy = why
	p.skipRemaining("cancelled: " + why)
	msg := "cancelled: " + why + "; the object stays"
	if st.Phase == v1alpha1.RunFailed {
		msg += "; the run had failed: " + st.Message
	}
	p.end(v1alpha1.RunCancelled, msg)
}

// restart starts a cancelled two-phase run over from its first step for a new request: the
// world may have changed since the steps of the withdrawn request ran. It counts as a retry, so
// that every step gets a fresh Idempotency-Key and fresh Job names.
func (p *pass) restart() {
	st := &p.run.Status
	p.reset(0, p.f.Requested, nil)
	st.RequestedBy, st.CancelledBy = p.f.Requested, ""
	st.Message = fmt.Sprintf("delete requested again by %s: starting over", p.f.Requested)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{LastTransitionTime: metav1.NewTime(p.now), Type: v1alpha1.ConditionComplete, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonDeleteRequested, Message: st.Message, ObservedGeneration: p.run.Generation})
	p.note(false, v1alpha1.ReasonDeleteRequested, "Delete requested again by %s: the pipeline starts over at step %s", p.f.Requested, st.Steps[0].Name)
}

// startedNote is the event of a run that goes on past its first pass.
func (p *pass) startedNote(policyName string) Event {
	run := p.run
	if p.twoPhase() {
		return Eventf(false, v1alpha1.ReasonDeleteRequested, "Delete requested by %s: %s runs its pipeline with the object alive (TeardownRun %s/%s), then deletes it",
			run.Status.RequestedBy, policyName, run.Namespace, run.Name)
	}
	return Eventf(false, v1alpha1.ReasonRunCreated, "Deletion held by %s until TeardownRun %s/%s completes", policyName, run.Namespace, run.Name)
}

// released says what the end of a run that lets its object go does to it: a two-phase run that
// succeeded (or failed under failurePolicy Release) deletes it.
func (p *pass) released() string {
	if p.twoPhase() && p.run.Status.Phase != v1alpha1.RunAbandoned {
		return "the operator deletes the object, as requested by " + p.run.Status.RequestedBy
	}
	return "finalizer " + p.run.Spec.Finalizer + " removed"
}
