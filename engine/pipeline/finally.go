package pipeline

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// end ends the pipeline in phase with msg. With finally steps, the run records the ending and
// stays Running while they run, starting in this pass: everything that follows a run in flight
// (its finalizer held, its object kept, its passes) goes on until they are done, and only then
// does it end as recorded. Without any (or a run that cannot be trusted), it ends now.
func (p *pass) end(phase v1alpha1.RunPhase, msg string) {
	if p.pipe == nil || len(p.pipe.Finally) == 0 || p.f.Rejected != nil {
		p.finish(phase, msg)
		return
	}
	st := &p.run.Status
	st.Endings++
	st.Ending = &v1alpha1.RunEnding{Phase: phase, Message: msg, Time: metav1.NewTime(p.now)}
	st.Phase, st.CompletionTime = v1alpha1.RunRunning, nil
	// Attempt numbers go on from an earlier ending's, so that a finally job step's new Job never
	// meets the old one under its name.
	prev := st.Finally
	st.Finally = make([]v1alpha1.StepStatus, 0, len(p.pipe.Finally))
	for _, step := range p.pipe.Finally {
		ss := v1alpha1.StepStatus{Name: step.Spec.Name, Phase: v1alpha1.StepPending}
		for _, old := range prev {
			if old.Name == ss.Name {
				ss.Attempts = old.Attempts
			}
		}
		st.Finally = append(st.Finally, ss)
	}
	p.runFinally(p.ctx)
}

// runFinally runs the finally steps of the recorded ending as far as they go, then ends the run
// as the ending says. A failed finally step is recorded and the next one runs: none changes the
// ending.
func (p *pass) runFinally(ctx context.Context) {
	st := &p.run.Status
	if p.pipe == nil {
		e := *st.Ending
		st.Ending = nil
		p.finish(e.Phase, fmt.Sprintf("%s; finally steps not run: the pipeline cannot be compiled: %v", e.Message, p.f.CompileErr))
		return
	}
	after, done := p.runFinallySteps(ctx)
	if !done {
		p.out.RequeueAfter = after
		return
	}
	e := *st.Ending
	st.Ending = nil
	msg := e.Message
	for _, ss := range st.Finally {
		if ss.Phase == v1alpha1.StepFailed {
			msg += fmt.Sprintf("; finally step %s failed: %s", ss.Name, ss.Message)
		}
	}
	p.finish(e.Phase, msg)
}

// runFinallySteps executes the finally steps in order until one must wait; done means all ended.
func (p *pass) runFinallySteps(ctx context.Context) (after time.Duration, done bool) {
	st := &p.run.Status
	for _, step := range p.pipe.Finally {
		var ss *v1alpha1.StepStatus
		for i := range st.Finally {
			if st.Finally[i].Name == step.Spec.Name {
				ss = &st.Finally[i]
			}
		}
		if ss == nil {
			st.Finally = append(st.Finally, v1alpha1.StepStatus{Name: step.Spec.Name, Phase: v1alpha1.StepPending})
			ss = &st.Finally[len(st.Finally)-1]
		}
		if ss.Phase.Finished() {
			continue
		}
		st.CurrentStep = step.Spec.Name
		if p.f.Unborn && step.NeedsRun && ss.Phase == v1alpha1.StepPending {
			return 0, false // the recorded run's first pass starts it
		}
		if after, done := p.runStep(ctx, step, ss); !done {
			return after, false
		}
	}
	return 0, true
}

// inList reports whether step is one of list (the finally or onStuck steps).
func (p *pass) inList(list []*policy.Step, step *policy.Step) bool {
	return p.pipe != nil && slices.Contains(list, step)
}

// endingPhase is how the pipeline ended, while its finally steps run.
func (p *pass) endingPhase() v1alpha1.RunPhase {
	if e := p.run.Status.Ending; e != nil {
		return e.Phase
	}
	return p.run.Status.Phase
}
