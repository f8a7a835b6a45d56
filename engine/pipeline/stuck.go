package pipeline

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// onStuck runs the onStuck steps of a run that still holds its object once it crosses its stuck
// time (Facts.StuckAt), once per run, beside the pipeline: it asks to come back at the crossing,
// starts the steps then, and takes them as far as they go in each pass. Those not done when the
// run ends are skipped.
func (p *pass) onStuck(ctx context.Context) {
	st := &p.run.Status
	if p.pipe == nil || len(p.pipe.OnStuck) == 0 || p.f.Rejected != nil {
		return
	}
	if !p.holding() {
		p.skipUnfinished(st.OnStuck, "the run ended")
		return
	}
	if st.StuckTime == nil {
		if p.f.StuckAt.IsZero() {
			return
		}
		if p.now.Before(p.f.StuckAt) {
			p.requeueBy(p.f.StuckAt.Sub(p.now))
			return
		}
		t := metav1.NewTime(p.now)
		st.StuckTime = &t
		for _, step := range p.pipe.OnStuck {
			st.OnStuck = append(st.OnStuck, v1alpha1.StepStatus{Name: step.Spec.Name, Phase: v1alpha1.StepPending})
		}
		p.note(true, v1alpha1.ReasonRunStuck, "Teardown stuck: %s for longer than the operator's --stuck-after; running its onStuck steps", stuckPhrase(st))
	}
	current := st.CurrentStep // onStuck steps run beside the pipeline: its step stays the current one
	defer func() { st.CurrentStep = current }()
	for _, step := range p.pipe.OnStuck {
		ss := onStuckStatus(st, step)
		if ss.Phase.Finished() || p.f.Unborn && step.NeedsRun && ss.Phase == v1alpha1.StepPending {
			continue
		}
		if after, done := p.runStep(ctx, step, ss); !done {
			p.requeueBy(after)
			return
		}
	}
}

// holding reports whether the run holds its object: in flight, or failed and keeping it.
func (p *pass) holding() bool {
	ph := p.run.Status.Phase
	return !ph.Finished() || !ph.Releases(p.run.Spec.Pipeline.FailurePolicy) && ph == v1alpha1.RunFailed
}

func stuckPhrase(st *v1alpha1.TeardownRunStatus) string {
	if st.Phase == v1alpha1.RunFailed {
		return "failed and keeping its object"
	}
	return "in flight at step " + st.CurrentStep
}

// onStuckStatus is the status of an onStuck step, added if missing.
func onStuckStatus(st *v1alpha1.TeardownRunStatus, step *policy.Step) *v1alpha1.StepStatus {
	for i := range st.OnStuck {
		if st.OnStuck[i].Name == step.Spec.Name {
			return &st.OnStuck[i]
		}
	}
	st.OnStuck = append(st.OnStuck, v1alpha1.StepStatus{Name: step.Spec.Name, Phase: v1alpha1.StepPending})
	return &st.OnStuck[len(st.OnStuck)-1]
}

// requeueBy brings the next pass forward to after, if that is sooner.
func (p *pass) requeueBy(after time.Duration) {
	after = max(after, time.Millisecond)
	if p.out.RequeueAfter == 0 || after < p.out.RequeueAfter {
		p.out.RequeueAfter = after
	}
}
