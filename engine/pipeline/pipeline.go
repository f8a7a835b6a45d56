// Package pipeline is a run's state machine with no client: given a run, its compiled pipeline,
// the time and what the engine read of the world (Facts), Advance edits the run's status and
// returns the effects the engine applies once that status is written: events, metric
// observations, attempts to release, kinds to watch, and when to come back. It needs no client,
// so it runs offline as well as in the operator; step actions are its only way out.
package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Facts are what the engine read of the world for one pass; the pipeline decides on them alone.
type Facts struct {
	Now time.Time
	// Pipeline is the run's compiled pipeline; CompileErr says why there is none.
	Pipeline   *policy.Pipeline
	CompileErr error
	// Rejected says why the run cannot be trusted; nil when it can.
	Rejected error
	// TargetGone reports that the object no longer exists.
	TargetGone bool
	// BreakGlass names who asked to abandon the run; empty if nobody did.
	BreakGlass string
	// Retry is the value of the run's retry annotation, and RetryBy the user who set it, as the
	// admission policy that checks requests authenticated them; empty when there is none.
	Retry, RetryBy string
	// RetryUntrusted says why the retry annotation is not acted on (that admission policy did
	// not check it); "" when it is.
	RetryUntrusted string
	// RetryAt is when the retry annotation was set, if known.
	RetryAt *metav1.Time
	// Unborn says the run is not recorded yet: the pass stops before a step that needs it
	// (policy.Step.NeedsRun), to be passed again once the run is recorded.
	Unborn bool
	// TargetDeleting reports that the object is being deleted.
	TargetDeleting bool
	// StuckAt is when the run counts as stuck (its creation plus the operator's --stuck-after):
	// its onStuck steps start then. Zero: never.
	StuckAt time.Time
	// Requested says who requests the deletion of a two-phase run's object (trigger
	// DeleteRequest): the delete-requested annotation and its author, or the deletion of the
	// object or its namespace. Empty means the request is withdrawn: the run is cancelled.
	Requested string
}

// Event is an event to record on the run and its target.
type Event struct {
	Warning bool
	Reason  string
	// Action names what the event is about: the step, for step events. The events recorder folds
	// events with the same object, reason and action into one series that keeps the first note,
	// so without it two steps succeeding in one pass would show as one.
	Action string
	Note   string
}

// Eventf builds an Event.
func Eventf(warning bool, reason, format string, args ...any) Event {
	return Event{Warning: warning, Reason: reason, Note: fmt.Sprintf(format, args...)}
}

// Metric names a metric an Observation is for.
type Metric int

const (
	// StepDuration observes a step's time from start to end (Phase set).
	StepDuration Metric = iota
	// StepFailure counts a failed attempt.
	StepFailure
	// PipelineDuration observes a run's time from start to end (Phase set).
	PipelineDuration
)

// Observation is one metric observation. Durations are measured from Since when the observation
// is made, in wall time: a step that starts and ends in one pass still took its request's time.
type Observation struct {
	Metric Metric
	Step   string
	Phase  string
	Since  time.Time
}

// Effects are what a pass asks of the world once the run's status is written.
type Effects struct {
	Events       []Event
	Observations []Observation
	// Settled names the steps whose attempt ended in the pass: their actions may release what
	// the attempt made (steps.Releaser).
	Settled []string
	// Watch lists the kinds whose changes should wake the run.
	Watch []steps.WatchTarget
	// RequeueAfter is when to come back; 0: only an event wakes the run.
	RequeueAfter time.Duration
	// Again is set when the pass stopped early to have the run's status written before it goes
	// on (a step that checkpoints): the next pass follows at once (RequeueAfter is minimal).
	Again bool
	// ClearRetry is the retry annotation's value the pass answered, to remove.
	ClearRetry string
}

// Step defaults and limits.
const (
	DefaultBackoff    = 5 * time.Second
	DefaultMaxBackoff = 5 * time.Minute
	// MaxOutputBytes bounds the JSON of one step's outputs, so run objects stay small.
	MaxOutputBytes = 16 * 1024
	// MaxRunBytes bounds the JSON of a run that a step's outputs may make. etcd refuses a
	// request over 1.5 MiB (its default), and a run whose status cannot be written holds its
	// object with nothing said but the operator's log; the last 256 KiB are for what is
	// written later (messages, conditions, managed fields). 32 steps of outputs at
	// MaxOutputBytes fit with a snapshot of up to about 750 KiB, and small outputs with a
	// ConfigMap at its 1 MiB limit.
	MaxRunBytes = 1280 * 1024
	// minRetryDelay is the shortest wait before a retry, whatever the configured backoff.
	minRetryDelay = 100 * time.Millisecond
	// defaultCheckAfter is when an in-progress step that names no time is looked at again.
	defaultCheckAfter = time.Second
	// checkpointDelay brings the run back at once after a pass that stopped to write a step's
	// end (policy.Step.Checkpoint): the run's own status write does not wake it.
	checkpointDelay = time.Millisecond
)

// pass is one Advance: the run being edited, the facts, and the effects so far.
type pass struct {
	// ctx is the Advance's, for the finally steps an ending starts.
	ctx  context.Context
	run  *v1alpha1.TeardownRun
	f    Facts
	now  time.Time
	out  Effects
	pipe *policy.Pipeline
	// object is the decoded snapshot, for expressions.
	object map[string]any
	// startedNow names the step this pass started, if any.
	startedNow string
	// startedRun is set when this pass started the run.
	startedRun bool
	// checkpointed is set when a step that checkpoints ended the pass (policy.Step.Checkpoint).
	checkpointed bool
}

// Advance takes run one pass forward, as far as it goes without waiting, editing its status in
// place (run must be the caller's own copy).
func Advance(ctx context.Context, run *v1alpha1.TeardownRun, f Facts) Effects {
	p := &pass{ctx: ctx, run: run, f: f, now: f.Now, pipe: f.Pipeline}
	retried := false
	if f.Retry != "" {
		retried = p.retryRequest(f.Retry)
	}
	switch {
	case run.Status.Ending != nil && f.Rejected == nil:
		p.runFinally(ctx) // the ending is decided: nothing but its finally steps is left
	case p.withdrawn():
		p.cancel(Withdrawn)
	case p.rerequested():
		p.restart()
		p.advance(ctx)
	case run.Status.Phase.Finished() && !retried:
		p.afterFinish()
	default:
		p.advance(ctx)
	}
	p.onStuck(ctx)
	if p.startedRun && !run.Status.Phase.Finished() {
		// Said only of a run that goes on past its first pass: one that ends in it is told by
		// its end alone (events are most of the API writes of a fast teardown).
		ref := run.Spec.PolicyRef
		started := p.startedNote(policy.KeyOf(ref).String())
		p.out.Events = append([]Event{started}, p.out.Events...)
	}
	return p.out
}

// advance moves an unfinished run forward: start, break glass, deadline, steps, finish.
func (p *pass) advance(ctx context.Context) {
	st := &p.run.Status
	if err := p.f.Rejected; err != nil {
		p.skipUnfinished(st.Finally, "run rejected") // an ending it had recorded is void
		p.start()
		p.skipRemaining("run rejected")
		p.setFailed(v1alpha1.ReasonRejected, err.Error())
		p.finish(v1alpha1.RunFailed, "rejected, nothing was run or released: "+err.Error())
		return
	}
	if st.Phase == "" || st.Phase == v1alpha1.RunPending {
		p.start()
	}
	switch {
	case p.f.BreakGlass != "" && p.twoPhase() && !p.f.TargetDeleting:
		p.cancel("break glass: " + p.f.BreakGlass)
	case p.f.BreakGlass != "":
		p.abandon(p.f.BreakGlass)
	case p.pipe == nil:
		msg := fmt.Sprintf("pipeline cannot be compiled: %v", p.f.CompileErr)
		p.setFailed(v1alpha1.ReasonInvalidPipeline, msg)
		p.finish(v1alpha1.RunFailed, msg)
	case p.f.TargetGone && !p.stepsDone():
		st.AbandonedBy = "the target was deleted without this run: its finalizer was removed by someone else"
		p.skipRemaining("the target is gone")
		p.end(v1alpha1.RunAbandoned, "target vanished before the pipeline finished")
	case st.Deadline != nil && !p.now.Before(st.Deadline.Time):
		msg := fmt.Sprintf("pipeline timed out after %s", p.run.Spec.Pipeline.Timeout.Duration)
		p.failCurrent(msg)
		p.skipRemaining("the pipeline timed out")
		p.note(true, v1alpha1.ReasonPipelineTimedOut, "Pipeline timed out after %s", p.run.Spec.Pipeline.Timeout.Duration)
		p.setFailed(v1alpha1.ReasonPipelineTimedOut, msg)
		p.end(v1alpha1.RunFailed, msg)
	default:
		p.runPipeline(ctx)
	}
}

// runPipeline runs the steps and ends the run when they are all done.
func (p *pass) runPipeline(ctx context.Context) {
	after, failed := p.runSteps(ctx)
	if p.checkpointed {
		p.out.RequeueAfter, p.out.Again = checkpointDelay, true // the next pass goes on, once this one is written
		return
	}
	if !p.stepsDone() {
		p.out.RequeueAfter = p.capAtDeadline(after)
		return
	}
	if failed == "" {
		p.end(v1alpha1.RunSucceeded, "all steps done")
		return
	}
	// Carry the step's own reason: "step export failed" alone sends everyone to describe.
	msg := fmt.Sprintf("step %s failed", failed)
	if ss := p.run.Status.Step(failed); ss != nil && ss.Message != "" {
		msg += ": " + ss.Message
	}
	p.setFailed(v1alpha1.ReasonStepFailed, msg)
	p.end(v1alpha1.RunFailed, msg)
}

func (p *pass) start() {
	p.startedRun = true
	st := &p.run.Status
	st.Phase = v1alpha1.RunRunning
	now := metav1.NewTime(p.now)
	st.StartTime = &now
	if p.twoPhase() {
		st.RequestedBy = p.f.Requested
	}
	if to := p.run.Spec.Pipeline.Timeout; to != nil && to.Duration > 0 {
		d := metav1.NewMicroTime(p.now.Add(to.Duration))
		st.Deadline = &d
	}
	st.Steps = make([]v1alpha1.StepStatus, 0, len(p.run.Spec.Pipeline.Steps))
	for _, s := range p.run.Spec.Pipeline.Steps {
		st.Steps = append(st.Steps, v1alpha1.StepStatus{Name: s.Name, Phase: v1alpha1.StepPending})
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{LastTransitionTime: metav1.NewTime(p.now), Type: v1alpha1.ConditionComplete, Status: metav1.ConditionFalse,
		Reason: string(v1alpha1.RunRunning), Message: "pipeline running", ObservedGeneration: p.run.Generation})
}

func (p *pass) abandon(who string) {
	p.run.Status.AbandonedBy = who
	p.skipRemaining("abandoned: " + who)
	p.end(v1alpha1.RunAbandoned, "abandoned by "+who)
}

// finish ends the run. The engine releases the target after the final status is written: a
// crash in between leaves a finished run that still holds its own finalizer, and the next
// reconcile completes the release.
func (p *pass) finish(phase v1alpha1.RunPhase, msg string) {
	st := &p.run.Status
	// A run that ended before (abandoned after failing) was observed when it ended.
	observe := !st.Phase.Finished()
	release := phase.Releases(p.run.Spec.Pipeline.FailurePolicy) && p.f.Rejected == nil
	now := metav1.NewTime(p.now)
	st.Phase, st.Message, st.CompletionTime, st.Ending = phase, msg, &now, nil
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{LastTransitionTime: metav1.NewTime(p.now), Type: v1alpha1.ConditionComplete, Status: metav1.ConditionTrue,
		Reason: string(phase), Message: msg, ObservedGeneration: p.run.Generation})
	fin := p.run.Spec.Finalizer
	switch {
	case phase == v1alpha1.RunSucceeded && p.startedRun:
		p.note(false, v1alpha1.ReasonSucceeded, "Teardown succeeded at once (%s); %s", p.foldStepEvents(), p.released())
	case phase == v1alpha1.RunSucceeded:
		p.note(false, v1alpha1.ReasonSucceeded, "Teardown succeeded; %s", p.released())
	case phase == v1alpha1.RunAbandoned:
		p.note(true, v1alpha1.ReasonAbandoned, "Teardown abandoned by %s; finalizer %s removed", st.AbandonedBy, fin)
	case phase == v1alpha1.RunCancelled:
		p.note(false, v1alpha1.ReasonCancelled, "Teardown cancelled: %s; the object stays. Request the deletion again to start over", st.CancelledBy)
	case release:
		p.note(true, v1alpha1.ReasonFailed, "Teardown failed (%s); failurePolicy Release: %s", msg, p.released())
	case p.twoPhase():
		p.note(true, v1alpha1.ReasonFailed, "Teardown failed (%s); the object stays as it was, not deleted: fix the cause and resume at the failed step (kubectl teardown retry %s -n %s, or annotate the run %s), or remove annotation %s from the object to withdraw the request",
			msg, p.run.Name, p.run.Namespace, v1alpha1.AnnotationRetry, v1alpha1.AnnotationDeleteRequested)
	default:
		p.note(true, v1alpha1.ReasonFailed, "Teardown failed (%s); failurePolicy Retain keeps the object: fix the cause and resume at the failed step (kubectl teardown retry %s -n %s, or annotate the run %s), or set annotation %s on the object to release it without the rest of the cleanup",
			msg, p.run.Name, p.run.Namespace, v1alpha1.AnnotationRetry, v1alpha1.AnnotationAbandon)
	}
	if st.StartTime != nil && observe {
		p.observe(Observation{Metric: PipelineDuration, Phase: string(phase), Since: st.StartTime.Time})
	}
}

// afterFinish handles a finished run that retains its target (failed under Retain): break glass
// releases it, and a target deleted by someone else ends it.
func (p *pass) afterFinish() {
	st := &p.run.Status
	if st.Phase.Releases(p.run.Spec.Pipeline.FailurePolicy) || p.f.Rejected != nil {
		return
	}
	if st.Phase == v1alpha1.RunCancelled {
		// Break glass lifted the veto; once the object is deleted, it is let go without a run.
		if p.f.BreakGlass != "" && p.f.TargetDeleting {
			st.AbandonedBy = p.f.BreakGlass
			p.end(v1alpha1.RunAbandoned, fmt.Sprintf("abandoned after it was cancelled, by %s", p.f.BreakGlass))
		}
		return
	}
	if p.f.TargetGone {
		// Nothing is left to hold or to retry: without this the run would count as stuck forever.
		st.AbandonedBy = "the target was deleted without this run: its finalizer was removed by someone else"
		p.end(v1alpha1.RunAbandoned, "target vanished after the run had failed: "+st.Message)
		return
	}
	if p.f.BreakGlass == "" {
		return
	}
	if p.twoPhase() && !p.f.TargetDeleting {
		p.cancel("break glass: " + p.f.BreakGlass)
		return
	}
	st.AbandonedBy = p.f.BreakGlass
	// The Failed condition stays True and the message keeps the failure: the cleanup did not
	// happen, and whoever looks later must see why.
	p.end(v1alpha1.RunAbandoned, fmt.Sprintf("abandoned after failure by %s; the run had failed: %s", p.f.BreakGlass, st.Message))
}

// setFailed records why a run failed in its Failed condition.
func (p *pass) setFailed(reason, msg string) {
	meta.SetStatusCondition(&p.run.Status.Conditions, metav1.Condition{LastTransitionTime: metav1.NewTime(p.now), Type: v1alpha1.ConditionFailed, Status: metav1.ConditionTrue,
		Reason: reason, Message: msg, ObservedGeneration: p.run.Generation})
}

// foldStepEvents removes the pass's events of steps that succeeded or were skipped, and says
// the same in a few words for the run's one event: a run that starts and succeeds in one pass
// costs two events (on the run and on its object), whatever its number of steps. Warnings stay.
func (p *pass) foldStepEvents() string {
	var parts []string
	p.out.Events = slices.DeleteFunc(p.out.Events, func(ev Event) bool {
		quiet := ev.Reason == v1alpha1.ReasonStepSucceeded || ev.Reason == v1alpha1.ReasonStepSkipped
		return quiet && !ev.Warning
	})
	for _, ss := range p.run.Status.Steps {
		parts = append(parts, ss.Name+" "+strings.ToLower(string(ss.Phase)))
	}
	return "steps: " + strings.Join(parts, ", ")
}

// note queues an event for the run and its target.
func (p *pass) note(warning bool, reason, format string, args ...any) {
	p.out.Events = append(p.out.Events, Eventf(warning, reason, format, args...))
}

// stepNote queues an event about one step.
func (p *pass) stepNote(step string, warning bool, reason, format string, args ...any) {
	ev := Eventf(warning, reason, format, args...)
	ev.Action = "Step " + step
	p.out.Events = append(p.out.Events, ev)
}

func (p *pass) observe(o Observation) { p.out.Observations = append(p.out.Observations, o) }

func (p *pass) settle(step string) { p.out.Settled = append(p.out.Settled, step) }

func (p *pass) capAtDeadline(after time.Duration) time.Duration {
	if d := p.run.Status.Deadline; d != nil {
		if left := d.Sub(p.now); after == 0 || left < after {
			return max(left, time.Millisecond)
		}
	}
	return after
}

// vars binds object, steps and run for one step's expressions.
func (p *pass) vars(ss *v1alpha1.StepStatus) expr.Vars {
	if p.object == nil {
		p.object = decodeObject(p.run)
	}
	return varsOf(p.run, p.object, ss)
}

// input is what a step's action sees of the run.
func (p *pass) input(ss *v1alpha1.StepStatus) *steps.Input {
	in := &steps.Input{Run: p.run, Status: ss.DeepCopy(), Vars: p.vars(ss), PolicyNamespace: policyNamespace(p.run), Now: p.now}
	if p.run.Status.Ending != nil && slices.ContainsFunc(p.run.Status.Finally, func(f v1alpha1.StepStatus) bool { return f.Name == ss.Name }) {
		in.Ending = p.run.Status.Endings
	}
	return in
}
