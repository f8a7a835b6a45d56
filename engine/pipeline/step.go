package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/steps"
)

// interruptedRecheck is when a step cut short by the operator's shutdown is looked at again
// (by the next replica, which reads the run anew).
const interruptedRecheck = time.Second

// SkippedPrefix starts the message of a step skipped because the pipeline ended before it (not
// by its guard): a retry resumes there.
const SkippedPrefix = "skipped: "

// runSteps executes steps in order until one must wait or the pipeline ends. It returns when to
// come back, and the name of the step that failed the pipeline, if one did.
func (p *pass) runSteps(ctx context.Context) (time.Duration, string) {
	for _, step := range p.pipe.Steps {
		ss := p.run.Status.Step(step.Spec.Name)
		if ss == nil {
			p.run.Status.Steps = append(p.run.Status.Steps, v1alpha1.StepStatus{Name: step.Spec.Name, Phase: v1alpha1.StepPending})
			ss = &p.run.Status.Steps[len(p.run.Status.Steps)-1]
		}
		if ss.Phase.Finished() {
			if ss.Phase == v1alpha1.StepFailed && step.Spec.OnFailure != v1alpha1.OnFailureContinue {
				return 0, step.Spec.Name
			}
			continue
		}
		p.run.Status.CurrentStep = step.Spec.Name
		if p.f.Unborn && step.NeedsRun && ss.Phase == v1alpha1.StepPending {
			return 0, "" // the recorded run's first pass starts it
		}
		after, done := p.runStep(ctx, step, ss)
		if !done {
			return after, ""
		}
		failed := ss.Phase == v1alpha1.StepFailed && step.Spec.OnFailure != v1alpha1.OnFailureContinue
		if failed {
			p.skipRemaining(fmt.Sprintf("step %s failed", step.Spec.Name))
		}
		// A step that checkpoints ends the pass when anything with effects would follow in it (a
		// next step, finally steps): its end is written first. The pipeline's own end needs no
		// checkpoint: it is written before the release.
		if step.Checkpoint && (len(p.pipe.Finally) > 0 || !failed && !p.lastStep(step)) {
			p.checkpointed = true
			return checkpointDelay, ""
		}
		if failed {
			return 0, step.Spec.Name
		}
	}
	return 0, ""
}

// lastStep reports whether step is the pipeline's last.
func (p *pass) lastStep(step *policy.Step) bool {
	return p.pipe.Steps[len(p.pipe.Steps)-1] == step
}

// runStep takes one step as far as it goes now; done means its phase is final, else after is
// when to look again.
func (p *pass) runStep(ctx context.Context, step *policy.Step, ss *v1alpha1.StepStatus) (after time.Duration, done bool) {
	if ctx.Err() != nil {
		return interruptedRecheck, false // the operator is stopping: the next replica goes on here
	}
	if ss.Phase == v1alpha1.StepPending && !p.startStep(ctx, step, ss) {
		return 0, true
	}
	if ss.Deadline != nil && !p.now.Before(ss.Deadline.Time) {
		p.timeOut(ctx, step, ss)
		return 0, true
	}
	if ss.RetryTime != nil {
		if p.now.Before(ss.RetryTime.Time) {
			return ss.RetryTime.Sub(p.now), false
		}
		ss.RetryTime = nil
		ss.Attempts++
	}
	result := step.Action.Execute(ctx, p.input(ss))
	if ctx.Err() != nil && result.Outcome != steps.Succeeded && result.Outcome != steps.InProgress {
		// Cut short by the operator's shutdown (its calls cancelled), not failed: the pass is
		// still recorded (what the step did so far, its state), and the attempt goes on.
		result.Outcome, result.CheckAfter = steps.InProgress, interruptedRecheck
		result.Message = "interrupted by the operator's shutdown; going on: " + result.Message
	}
	p.keep(ss, &result)
	switch result.Outcome {
	case steps.Succeeded:
		p.endStep(step, ss, v1alpha1.StepSucceeded, result.Message)
		return 0, true
	case steps.InProgress:
		ss.Message = result.Message
		after := result.CheckAfter
		if after <= 0 {
			after = defaultCheckAfter
		}
		after = capAt(after, p.now, ss.Deadline)
		next := metav1.NewTime(p.now.Add(after).Truncate(time.Second))
		ss.NextCheckTime = &next
		p.out.Watch = append(p.out.Watch, result.Watch...) // onStuck steps may wait in the same pass
		return after, false
	}
	return p.attemptFailed(step, ss, result)
}

// startStep evaluates a pending step's guard and starts its first attempt. It returns false when
// the guard ended the step (skipped, or failed to evaluate).
func (p *pass) startStep(ctx context.Context, step *policy.Step, ss *v1alpha1.StepStatus) bool {
	name := step.Spec.Name
	if step.When != nil {
		ok, err := step.When.EvalBool(ctx, p.vars(ss))
		if err != nil {
			p.endStep(step, ss, v1alpha1.StepFailed, fmt.Sprintf("when: %v", err))
			return false
		}
		if !ok {
			p.endStep(step, ss, v1alpha1.StepSkipped, fmt.Sprintf("when is false: %s", step.When))
			return false
		}
	}
	begin(step, ss, p.now)
	p.stepNote(name, false, v1alpha1.ReasonStepStarted, "Step %s (%s) started", name, step.Kind)
	p.startedNow = name
	return true
}

// begin starts a step's next attempt at now: Running, its attempt counted, its deadline set from
// its timeout. Attempts go on from a retried run's last one; the retry limit counts from
// FirstAttempt.
func begin(step *policy.Step, ss *v1alpha1.StepStatus, now time.Time) {
	start := metav1.NewTime(now)
	ss.Phase, ss.StartTime = v1alpha1.StepRunning, &start
	ss.Attempts++
	if ss.Attempts > 1 {
		ss.FirstAttempt = ss.Attempts
	}
	if to := step.Spec.Timeout; to != nil && to.Duration > 0 {
		d := metav1.NewMicroTime(now.Add(to.Duration))
		ss.Deadline = &d
	}
}

// Started is the status of a step whose first attempt starts at now, as a run's pass sets it
// before the step's first execution: kubectl teardown plan renders a step's action with it, so
// that what depends on the status (a Job's activeDeadlineSeconds, from the step's deadline) is
// what the step really does.
func Started(step *policy.Step, now time.Time) *v1alpha1.StepStatus {
	ss := &v1alpha1.StepStatus{Name: step.Spec.Name, Phase: v1alpha1.StepPending}
	begin(step, ss, now)
	return ss
}

// timeOut ends a step past its deadline: with the outcome of work that ended by the deadline
// while no one looked (steps.Settler), else as failed.
func (p *pass) timeOut(ctx context.Context, step *policy.Step, ss *v1alpha1.StepStatus) {
	if s, ok := step.Action.(steps.Settler); ok && ss.RetryTime == nil {
		if result, ok := s.Settled(ctx, p.input(ss), ss.Deadline.Time); ok && result.Outcome != steps.InProgress {
			p.keep(ss, &result)
			phase := v1alpha1.StepSucceeded
			if result.Outcome == steps.Failed {
				phase = v1alpha1.StepFailed
			}
			p.endStep(step, ss, phase, result.Message+" (by the step's deadline)")
			return
		}
	}
	p.endStep(step, ss, v1alpha1.StepFailed, fmt.Sprintf("timed out after %s (%d attempts); last: %s", step.Spec.Timeout.Duration, roundAttempts(ss), ss.Message))
}

// attemptFailed schedules the next attempt of a failed one within the retry limit, or fails the
// step.
func (p *pass) attemptFailed(step *policy.Step, ss *v1alpha1.StepStatus, result steps.Result) (time.Duration, bool) {
	name := step.Spec.Name
	p.observe(Observation{Metric: StepFailure, Step: name})
	if result.Retryable && roundAttempts(ss) <= retryLimit(step) {
		wait := result.RetryAfter
		if wait <= 0 {
			wait = backoff(step.Spec.Retry, roundAttempts(ss))
		}
		// A zero backoff still needs a requeue: RequeueAfter 0 would mean "no requeue" and the
		// run's own status write does not wake it.
		wait = max(wait, minRetryDelay)
		at := metav1.NewMicroTime(p.now.Add(wait))
		next := metav1.NewTime(at.Time)
		ss.RetryTime, ss.NextCheckTime = &at, &next
		ss.Message = fmt.Sprintf("attempt %d failed: %s; retrying in %s", roundAttempts(ss), result.Message, wait.Round(time.Millisecond))
		p.settle(name)
		p.stepNote(name, true, v1alpha1.ReasonStepRetrying, "Step %s: %s", name, ss.Message)
		return capAt(wait, p.now, ss.Deadline), false
	}
	msg := result.Message
	if n := roundAttempts(ss); n > 1 {
		msg = fmt.Sprintf("%s (after %d attempts)", msg, n)
	}
	p.endStep(step, ss, v1alpha1.StepFailed, msg)
	return 0, true
}

// keep records what an execution returned for the step to keep: its state and outputs. Outputs
// over the size limit, or that would make the run too large to write, turn the result into a
// failure.
func (p *pass) keep(ss *v1alpha1.StepStatus, result *steps.Result) {
	if result.State != nil {
		ss.State = result.State
	}
	if result.Approval != nil {
		p.noteAnswers(ss, result.Approval)
		ss.Approval = result.Approval
	}
	if len(result.Outputs) > 0 {
		err := checkOutputs(result.Outputs)
		if err == nil {
			err = p.checkRunSize(ss, result.Outputs)
		}
		if err != nil {
			*result = steps.Fail(false, "%v", err)
		} else {
			ss.Outputs = result.Outputs
		}
	}
}

// noteAnswers tells of each answer an approval step counted in this pass.
func (p *pass) noteAnswers(ss *v1alpha1.StepStatus, now *v1alpha1.ApprovalStatus) {
	counted := 0
	if ss.Approval != nil {
		counted = len(ss.Approval.Decisions)
	}
	for _, d := range now.Decisions[min(counted, len(now.Decisions)):] {
		if d.Decision == v1alpha1.Reject {
			p.stepNote(ss.Name, true, v1alpha1.ReasonRejectionRecorded, "Step %s rejected by %s (attempt %d): %s", ss.Name, d.Approver.Username, d.Attempt, d.Reason)
			continue
		}
		p.stepNote(ss.Name, false, v1alpha1.ReasonApprovalRecorded, "Step %s approved by %s (attempt %d): %s", ss.Name, d.Approver.Username, d.Attempt, d.Reason)
	}
}

// checkRunSize refuses outputs that would make the run more than MaxRunBytes of JSON.
func (p *pass) checkRunSize(ss *v1alpha1.StepStatus, outputs map[string]apiextensionsv1.JSON) error {
	kept := ss.Outputs
	ss.Outputs = outputs
	b, err := json.Marshal(p.run)
	ss.Outputs = kept
	if err != nil || len(b) <= MaxRunBytes {
		return nil
	}
	return fmt.Errorf("outputs would make the run %d bytes of JSON, over the limit of %d for a run (etcd refuses larger objects); "+
		"the target's snapshot takes %d bytes of it", len(b), MaxRunBytes, len(p.run.Spec.Object.Raw))
}

// endStep gives a step its final phase and tells.
func (p *pass) endStep(step *policy.Step, ss *v1alpha1.StepStatus, phase v1alpha1.StepPhase, msg string) {
	if ss.Phase == v1alpha1.StepRunning {
		p.settle(step.Spec.Name)
	}
	now := metav1.NewTime(p.now)
	ss.Phase, ss.Message, ss.CompletionTime, ss.NextCheckTime, ss.RetryTime = phase, msg, &now, nil, nil
	name := step.Spec.Name
	if p.startedNow == name {
		// Started and ended in one pass: one event tells both, which halves the events of
		// instant steps (events are most of the API writes of a fast pipeline).
		p.out.Events = slices.DeleteFunc(p.out.Events, func(ev Event) bool {
			return ev.Reason == v1alpha1.ReasonStepStarted && ev.Action == "Step "+name
		})
		msg = "started and " + strings.ToLower(string(phase)) + " at once: " + msg
	}
	switch {
	case phase == v1alpha1.StepSucceeded:
		p.stepNote(name, false, v1alpha1.ReasonStepSucceeded, "Step %s succeeded: %s", name, msg)
	case phase == v1alpha1.StepSkipped:
		p.stepNote(name, false, v1alpha1.ReasonStepSkipped, "Step %s skipped: %s", name, msg)
	case p.inList(p.pipe.OnStuck, step):
		p.stepNote(name, true, v1alpha1.ReasonStepFailed, "onStuck step %s failed: %s", name, msg)
	case p.inList(p.pipe.Finally, step):
		p.stepNote(name, true, v1alpha1.ReasonStepFailed, "Finally step %s failed; the run still ends %s: %s", name, p.endingPhase(), msg)
	case step.Spec.OnFailure == v1alpha1.OnFailureContinue:
		p.stepNote(name, true, v1alpha1.ReasonStepFailed, "Step %s failed, continuing (onFailure: Continue): %s", name, msg)
	default:
		p.stepNote(name, true, v1alpha1.ReasonStepFailed, "Step %s failed: %s", name, msg)
	}
	if ss.StartTime != nil {
		p.observe(Observation{Metric: StepDuration, Step: name, Phase: string(phase), Since: ss.StartTime.Time})
	}
}

// failCurrent fails the step in progress, if any.
func (p *pass) failCurrent(msg string) {
	for i := range p.run.Status.Steps {
		ss := &p.run.Status.Steps[i]
		if ss.Phase == v1alpha1.StepRunning {
			p.settle(ss.Name)
			now := metav1.NewTime(p.now)
			ss.Phase, ss.Message, ss.CompletionTime, ss.NextCheckTime, ss.RetryTime = v1alpha1.StepFailed, msg, &now, nil, nil
		}
	}
}

// skipRemaining marks every step not yet finished as Skipped.
func (p *pass) skipRemaining(why string) { p.skipUnfinished(p.run.Status.Steps, why) }

// skipUnfinished marks the steps of list not yet finished as Skipped; an attempt in flight is let
// go (settled).
func (p *pass) skipUnfinished(list []v1alpha1.StepStatus, why string) {
	for i := range list {
		ss := &list[i]
		if !ss.Phase.Finished() {
			if ss.Phase == v1alpha1.StepRunning {
				p.settle(ss.Name)
			}
			now := metav1.NewTime(p.now)
			ss.Phase, ss.Message, ss.CompletionTime, ss.NextCheckTime, ss.RetryTime = v1alpha1.StepSkipped, SkippedPrefix+why, &now, nil, nil
		}
	}
}

func (p *pass) stepsDone() bool {
	for _, ss := range p.run.Status.Steps {
		if !ss.Phase.Finished() {
			return false
		}
	}
	return len(p.run.Status.Steps) > 0
}

// roundAttempts counts a step's attempts since it last started (a retried run starts it again).
func roundAttempts(ss *v1alpha1.StepStatus) int32 {
	return ss.Attempts - max(ss.FirstAttempt, 1) + 1
}

// capAt shortens d so that a wait ends no later than deadline.
func capAt(d time.Duration, now time.Time, deadline *metav1.MicroTime) time.Duration {
	if deadline != nil {
		if left := deadline.Sub(now); left < d {
			return max(left, time.Millisecond)
		}
	}
	return d
}

func retryLimit(step *policy.Step) int32 {
	if step.Spec.Retry == nil {
		return 0
	}
	return step.Spec.Retry.Limit
}

// backoff is the wait before the retry that follows attempt n (1-based): the initial backoff,
// doubled per retry, capped.
func backoff(rp *v1alpha1.RetryPolicy, n int32) time.Duration {
	base, ceiling := DefaultBackoff, DefaultMaxBackoff
	if rp != nil && rp.Backoff != nil {
		base = rp.Backoff.Duration
	}
	if rp != nil && rp.MaxBackoff != nil {
		ceiling = rp.MaxBackoff.Duration
	}
	d := base
	for i := int32(1); i < n && d < ceiling; i++ {
		if d > ceiling/2 {
			return ceiling // doubling would pass the ceiling (or overflow)
		}
		d *= 2
	}
	return min(d, ceiling)
}

func checkOutputs(outputs map[string]apiextensionsv1.JSON) error {
	size := 0
	for k, v := range outputs {
		size += len(k) + len(v.Raw)
	}
	if size > MaxOutputBytes {
		return fmt.Errorf("outputs are %d bytes of JSON, over the limit of %d", size, MaxOutputBytes)
	}
	return nil
}
