package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/expr"
	"github.com/teardown-dev/teardown-operator/engine/naming"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Step defaults.
const (
	DefaultBackoff    = 5 * time.Second
	DefaultMaxBackoff = 5 * time.Minute
	// MaxOutputBytes bounds the JSON of one step's outputs, so run objects stay small.
	MaxOutputBytes = 16 * 1024
	// minRetryDelay is the shortest wait before a retry, whatever the configured backoff.
	minRetryDelay = 100 * time.Millisecond
	// ConditionComplete is True once a run's phase is final.
	ConditionComplete = "Complete"
)

// runReconciler advances one run's pipeline per reconcile, as far as it can go without waiting.
type runReconciler struct {
	*Engine
}

func (r *runReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cached, err := r.readRun(ctx, req.NamespacedName)
	if err != nil || cached == nil {
		return reconcile.Result{}, err
	}
	p, err := r.newPass(ctx, cached)
	if err != nil {
		return reconcile.Result{}, err
	}
	var res reconcile.Result
	retried := false
	if value := cached.Annotations[AnnotationRetry]; value != "" {
		retried = p.retryRequest(value)
	}
	if p.run.Status.Phase.Finished() && !retried {
		p.afterFinish()
	} else {
		res, err = p.advance(ctx)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.commit(ctx, p); err != nil {
		r.written.set(req.NamespacedName, unknownVersion)
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, err
	}
	// Only what is written is observed and logged: a pass redone after a conflict counts once.
	for _, observe := range p.observations {
		observe()
	}
	logTransitions(ctx, p.orig, p.run)
	if p.clearRetry != "" {
		if err := r.clearRetryAnnotation(ctx, p.run, p.clearRetry); err != nil {
			ctrl.LoggerFrom(ctx).Info("cannot remove the retry annotation yet", "error", err.Error())
			res = earliest(res, reconcile.Result{RequeueAfter: conflictRetry})
		}
	}
	p.flushEvents(ctx)
	p.releaseSettled(ctx)
	r.trackWatches(req, p.watch)
	if p.run.Status.Phase.Finished() {
		return r.cleanUp(ctx, p.run)
	}
	return res, nil
}

// readRun reads a run from the cache, or from the API server when the cache may not hold this
// engine's last write to it (see writtenVersions). It returns nil once the run is gone.
func (r *runReconciler) readRun(ctx context.Context, key types.NamespacedName) (*v1alpha1.TeardownRun, error) {
	run := &v1alpha1.TeardownRun{}
	err := r.client.Get(ctx, key, run)
	if err == nil && r.written.stale(key, run.ResourceVersion) {
		err = r.reader.Get(ctx, key, run)
	}
	if apierrors.IsNotFound(err) {
		r.written.forget(key)
		r.trackWatches(reconcile.Request{NamespacedName: key}, nil)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return run, nil
}

// trusted checks that a run's spec is one the engine could have written: its finalizer is its
// policy's, it lives in its target's namespace or the run namespace, and a TeardownPolicy's run
// targets that policy's namespace. The engine acts with its own rights on the target a run names,
// so a hand-made run must not be able to remove any finalizer from any object.
func (e *Engine) trusted(run *v1alpha1.TeardownRun) error {
	ref, t := run.Spec.PolicyRef, run.Spec.Target
	switch {
	case run.Spec.Finalizer != naming.Finalizer(ref.Kind, ref.Name):
		return fmt.Errorf("spec.finalizer %q is not the finalizer of %s %s", run.Spec.Finalizer, ref.Kind, ref.Name)
	case run.Namespace != t.Namespace && run.Namespace != e.opts.RunNamespace:
		return fmt.Errorf("a run lives in its target's namespace or in %s, not %s", e.opts.RunNamespace, run.Namespace)
	case ref.Kind == policy.KindNamespaced && t.Namespace != ref.Namespace:
		return fmt.Errorf("a TeardownPolicy's run can only target its own namespace %q", ref.Namespace)
	case ref.Kind == policy.KindCluster && ref.Namespace != "":
		return fmt.Errorf("spec.policyRef.namespace must be empty for a ClusterTeardownPolicy")
	}
	return nil
}

// pass is one reconcile of a run: the run being edited, and what the pass learned and will say.
type pass struct {
	e      *Engine
	orig   *v1alpha1.TeardownRun // as read from the cache; never modified
	run    *v1alpha1.TeardownRun // a deep copy, edited
	pipe   *policy.Pipeline
	now    time.Time
	tkey   TargetKey
	target *metav1.PartialObjectMetadata // the target's metadata (see readTarget); nil once it is gone
	object map[string]any                // the snapshot, for expressions
	events []runEvent
	watch  []steps.WatchTarget
	// startedNow names the step this pass started, if any.
	startedNow string
	// settled names the steps whose attempt ended in this pass, with or without a result of the
	// action's own: their actions may release what the attempt made (see steps.Releaser).
	settled []string
	// observations are the metric observations of the pass, made once its status is written.
	observations []func()
	// clearRetry is the retry annotation's value this pass handled, removed after the write.
	clearRetry string
}

func (r *runReconciler) newPass(ctx context.Context, cached *v1alpha1.TeardownRun) (*pass, error) {
	t := cached.Spec.Target
	gv, _ := schema.ParseGroupVersion(t.APIVersion)
	p := &pass{
		e:    r.Engine,
		orig: cached,
		run:  cached.DeepCopy(),
		now:  time.Now(),
		tkey: TargetKey{GVK: gv.WithKind(t.Kind), Namespace: t.Namespace, Name: t.Name},
	}
	if cached.Status.Phase.Finished() && cached.Status.Phase.Releases(cached.Spec.Pipeline.FailurePolicy) {
		return p, nil // done with its target; cleanUp reads what it needs
	}
	target, err := r.readTarget(ctx, p.tkey, t.UID)
	if err != nil {
		return nil, err
	}
	p.target = target
	return p, nil
}

// readTarget returns the target's metadata, or nil once it is gone. The metadata informer serves
// it; the API server is asked only when the cache misses it (gone, or not watched) and when the
// break-glass annotation is set, whose author is in the managed fields the cache drops.
func (r *runReconciler) readTarget(ctx context.Context, key TargetKey, uid types.UID) (*metav1.PartialObjectMetadata, error) {
	if m, ok := r.watches.Get(key.GVK, key.Namespace, key.Name); ok && m.UID == uid && m.Annotations[AnnotationAbandon] == "" {
		return m, nil
	}
	live := metaRef(key.GVK, key.Namespace, key.Name)
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, live)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading target %s: %w", key, err)
	case live.UID != uid:
		return nil, nil
	}
	return live, nil
}

// advance moves an unfinished run forward: start, break glass, deadline, steps, finish.
func (p *pass) advance(ctx context.Context) (reconcile.Result, error) {
	st := &p.run.Status
	if err := p.e.trusted(p.run); err != nil {
		p.start()
		p.skipRemaining("run rejected")
		p.setFailed(reasonRejected, err.Error())
		p.finish(v1alpha1.RunFailed, "rejected, nothing was run or released: "+err.Error())
		return reconcile.Result{}, nil
	}
	if st.Phase == "" || st.Phase == v1alpha1.RunPending {
		p.start()
	}
	if who := p.breakGlass(); who != "" {
		p.abandon(who)
		return reconcile.Result{}, nil
	}
	pipe, err := p.e.compiler.PipelineForRun(p.run)
	if err != nil {
		msg := fmt.Sprintf("pipeline cannot be compiled: %v", err)
		p.setFailed(reasonInvalidPipeline, msg)
		p.finish(v1alpha1.RunFailed, msg)
		return reconcile.Result{}, nil
	}
	p.pipe = pipe
	if p.target == nil && !p.stepsDone() {
		st.AbandonedBy = "the target was deleted without this run: its finalizer was removed by someone else"
		p.skipRemaining("the target is gone")
		p.finish(v1alpha1.RunAbandoned, "target vanished before the pipeline finished")
		return reconcile.Result{}, nil
	}
	if st.Deadline != nil && !p.now.Before(st.Deadline.Time) {
		p.failCurrent(fmt.Sprintf("pipeline timed out after %s", p.run.Spec.Pipeline.Timeout.Duration))
		p.skipRemaining("the pipeline timed out")
		p.note(true, ReasonPipelineTimedOut, "Pipeline timed out after %s", p.run.Spec.Pipeline.Timeout.Duration)
		msg := fmt.Sprintf("pipeline timed out after %s", p.run.Spec.Pipeline.Timeout.Duration)
		p.setFailed(reasonPipelineTimedOut, msg)
		p.finish(v1alpha1.RunFailed, msg)
		return reconcile.Result{}, nil
	}
	res, failed := p.runSteps(ctx)
	if !p.stepsDone() {
		return p.capAtDeadline(res), nil
	}
	if failed != "" {
		// Carry the step's own reason: "step export failed" alone sends everyone to describe.
		msg := fmt.Sprintf("step %s failed", failed)
		if ss := p.run.Status.Step(failed); ss != nil && ss.Message != "" {
			msg += ": " + ss.Message
		}
		p.setFailed(reasonStepFailed, msg)
		p.finish(v1alpha1.RunFailed, msg)
	} else {
		p.finish(v1alpha1.RunSucceeded, "all steps done")
	}
	return reconcile.Result{}, nil
}

func (p *pass) start() {
	st := &p.run.Status
	st.Phase = v1alpha1.RunRunning
	now := metav1.NewTime(p.now)
	st.StartTime = &now
	if to := p.run.Spec.Pipeline.Timeout; to != nil && to.Duration > 0 {
		d := metav1.NewMicroTime(p.now.Add(to.Duration))
		st.Deadline = &d
	}
	st.Steps = make([]v1alpha1.StepStatus, 0, len(p.run.Spec.Pipeline.Steps))
	for _, s := range p.run.Spec.Pipeline.Steps {
		st.Steps = append(st.Steps, v1alpha1.StepStatus{Name: s.Name, Phase: v1alpha1.StepPending})
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionComplete, Status: metav1.ConditionFalse,
		Reason: string(v1alpha1.RunRunning), Message: "pipeline running", ObservedGeneration: p.run.Generation})
}

// breakGlass returns who asked to abandon the run, or "".
func (p *pass) breakGlass() string {
	if p.target != nil {
		if v := p.target.Annotations[AnnotationAbandon]; v != "" {
			who := fmt.Sprintf("annotation %s=%q on the target", AnnotationAbandon, v)
			if m := policy.ManagerOf(p.target, "f:metadata", "f:annotations", "f:"+AnnotationAbandon); m != "" {
				who += ", set by field manager " + m
			}
			return who
		}
	}
	ref := p.run.Spec.PolicyRef
	if c := p.e.registry.Get(policy.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}); c != nil && c.Suspended && c.UID == ref.UID {
		who := fmt.Sprintf("spec.suspend on %s %s", ref.Kind, ref.Name)
		if c.SuspendedBy != "" {
			who += ", set by field manager " + c.SuspendedBy
		}
		return who
	}
	return ""
}

func (p *pass) abandon(who string) {
	p.run.Status.AbandonedBy = who
	p.skipRemaining("abandoned: " + who)
	p.finish(v1alpha1.RunAbandoned, "abandoned by "+who)
}

// runSteps executes steps in order until one must wait or the pipeline ends. It returns when to
// come back, and the name of the step that failed the pipeline, if one did.
func (p *pass) runSteps(ctx context.Context) (reconcile.Result, string) {
	for _, step := range p.pipe.Steps {
		ss := p.run.Status.Step(step.Spec.Name)
		if ss == nil {
			p.run.Status.Steps = append(p.run.Status.Steps, v1alpha1.StepStatus{Name: step.Spec.Name, Phase: v1alpha1.StepPending})
			ss = &p.run.Status.Steps[len(p.run.Status.Steps)-1]
		}
		if ss.Phase.Finished() {
			if ss.Phase == v1alpha1.StepFailed && step.Spec.OnFailure != v1alpha1.OnFailureContinue {
				return reconcile.Result{}, step.Spec.Name
			}
			continue
		}
		p.run.Status.CurrentStep = step.Spec.Name
		res, done := p.runStep(ctx, step, ss)
		if !done {
			return res, ""
		}
		if ss.Phase == v1alpha1.StepFailed && step.Spec.OnFailure != v1alpha1.OnFailureContinue {
			p.skipRemaining(fmt.Sprintf("step %s failed", step.Spec.Name))
			return reconcile.Result{}, step.Spec.Name
		}
	}
	return reconcile.Result{}, ""
}

// runStep takes one step as far as it goes now; done means its phase is final.
func (p *pass) runStep(ctx context.Context, step *policy.Step, ss *v1alpha1.StepStatus) (reconcile.Result, bool) {
	name := step.Spec.Name
	if ss.Phase == v1alpha1.StepPending {
		if step.When != nil {
			ok, err := step.When.EvalBool(ctx, p.vars(ss))
			if err != nil {
				p.endStep(step, ss, v1alpha1.StepFailed, fmt.Sprintf("when: %v", err))
				return reconcile.Result{}, true
			}
			if !ok {
				p.endStep(step, ss, v1alpha1.StepSkipped, fmt.Sprintf("when is false: %s", step.When))
				return reconcile.Result{}, true
			}
		}
		now := metav1.NewTime(p.now)
		// Attempts go on from a retried run's last one; the retry limit counts from FirstAttempt.
		ss.Phase, ss.StartTime = v1alpha1.StepRunning, &now
		ss.Attempts++
		if ss.Attempts > 1 {
			ss.FirstAttempt = ss.Attempts
		}
		if to := step.Spec.Timeout; to != nil && to.Duration > 0 {
			d := metav1.NewMicroTime(p.now.Add(to.Duration))
			ss.Deadline = &d
		}
		p.stepNote(name, false, ReasonStepStarted, "Step %s (%s) started", name, step.Kind)
		p.startedNow = name
	}
	if ss.Deadline != nil && !p.now.Before(ss.Deadline.Time) {
		if s, ok := step.Action.(steps.Settler); ok && ss.RetryTime == nil {
			// The work may have ended by the deadline while no one looked (the operator was down).
			if result, ok := s.Settled(ctx, p.input(ss), ss.Deadline.Time); ok && result.Outcome != steps.InProgress {
				p.keep(ss, &result)
				phase := v1alpha1.StepSucceeded
				if result.Outcome == steps.Failed {
					phase = v1alpha1.StepFailed
				}
				p.endStep(step, ss, phase, result.Message+" (by the step's deadline)")
				return reconcile.Result{}, true
			}
		}
		p.endStep(step, ss, v1alpha1.StepFailed, fmt.Sprintf("timed out after %s (%d attempts); last: %s", step.Spec.Timeout.Duration, roundAttempts(ss), ss.Message))
		return reconcile.Result{}, true
	}
	if ss.RetryTime != nil {
		if p.now.Before(ss.RetryTime.Time) {
			return reconcile.Result{RequeueAfter: ss.RetryTime.Sub(p.now)}, false
		}
		ss.RetryTime = nil
		ss.Attempts++
	}
	result := step.Action.Execute(ctx, p.input(ss))
	p.keep(ss, &result)
	switch result.Outcome {
	case steps.Succeeded:
		p.endStep(step, ss, v1alpha1.StepSucceeded, result.Message)
		return reconcile.Result{}, true
	case steps.InProgress:
		ss.Message = result.Message
		after := result.CheckAfter
		if after <= 0 {
			after = time.Second
		}
		after = capAt(after, p.now, ss.Deadline)
		next := metav1.NewTime(p.now.Add(after).Truncate(time.Second))
		ss.NextCheckTime = &next
		p.watch = result.Watch
		return reconcile.Result{RequeueAfter: after}, false
	}
	policyLabel := p.policyLabel()
	p.observe(func() { p.e.metrics.stepFailures.WithLabelValues(policyLabel, name).Inc() })
	if result.Retryable && roundAttempts(ss) <= retryLimit(step) {
		wait := result.RetryAfter
		if wait <= 0 {
			wait = backoff(step.Spec.Retry, ss.Attempts)
		}
		// A zero backoff still needs a requeue: RequeueAfter 0 would mean "no requeue" and the
		// run's own status write does not wake it.
		wait = max(wait, minRetryDelay)
		at := metav1.NewMicroTime(p.now.Add(wait))
		next := metav1.NewTime(at.Time)
		ss.RetryTime, ss.NextCheckTime = &at, &next
		ss.Message = fmt.Sprintf("attempt %d failed: %s; retrying in %s", roundAttempts(ss), result.Message, wait.Round(time.Millisecond))
		p.settled = append(p.settled, name)
		p.stepNote(name, true, ReasonStepRetrying, "Step %s: %s", name, ss.Message)
		return reconcile.Result{RequeueAfter: capAt(wait, p.now, ss.Deadline)}, false
	}
	msg := result.Message
	if n := roundAttempts(ss); n > 1 {
		msg = fmt.Sprintf("%s (after %d attempts)", msg, n)
	}
	p.endStep(step, ss, v1alpha1.StepFailed, msg)
	return reconcile.Result{}, true
}

// keep records what an execution returned for the step to keep: its state and outputs. Outputs
// over the size limit turn the result into a failure.
func (p *pass) keep(ss *v1alpha1.StepStatus, result *steps.Result) {
	if result.State != nil {
		ss.State = result.State
	}
	if len(result.Outputs) > 0 {
		if err := checkOutputs(result.Outputs); err != nil {
			*result = steps.Fail(false, "%v", err)
		} else {
			ss.Outputs = result.Outputs
		}
	}
}

// endStep gives a step its final phase and tells.
func (p *pass) endStep(step *policy.Step, ss *v1alpha1.StepStatus, phase v1alpha1.StepPhase, msg string) {
	if ss.Phase == v1alpha1.StepRunning {
		p.settled = append(p.settled, step.Spec.Name)
	}
	now := metav1.NewTime(p.now)
	ss.Phase, ss.Message, ss.CompletionTime, ss.NextCheckTime, ss.RetryTime = phase, msg, &now, nil, nil
	name := step.Spec.Name
	if p.startedNow == name {
		// Started and ended in one pass: one event tells both, which halves the events of
		// instant steps (events are most of the API writes of a fast pipeline).
		p.events = slices.DeleteFunc(p.events, func(ev runEvent) bool {
			return ev.reason == ReasonStepStarted && ev.action == "Step "+name
		})
		msg = "started and " + strings.ToLower(string(phase)) + " at once: " + msg
	}
	switch phase {
	case v1alpha1.StepSucceeded:
		p.stepNote(name, false, ReasonStepSucceeded, "Step %s succeeded: %s", name, msg)
	case v1alpha1.StepSkipped:
		p.stepNote(name, false, ReasonStepSkipped, "Step %s skipped: %s", name, msg)
	case v1alpha1.StepFailed:
		if step.Spec.OnFailure == v1alpha1.OnFailureContinue {
			p.stepNote(name, true, ReasonStepFailed, "Step %s failed, continuing (onFailure: Continue): %s", name, msg)
		} else {
			p.stepNote(name, true, ReasonStepFailed, "Step %s failed: %s", name, msg)
		}
	}
	if ss.StartTime != nil {
		// Wall time, not the pass's clock: a step that starts and ends in one pass (an http
		// request answered at once) still took the time of its request.
		start, policyLabel := ss.StartTime.Time, p.policyLabel()
		p.observe(func() {
			p.e.metrics.stepDuration.WithLabelValues(policyLabel, name, string(phase)).Observe(time.Since(start).Seconds())
		})
	}
}

// releaseSettled lets the actions of steps whose attempt ended in this pass release what the
// attempt made. It runs after the status is written, so nothing is released for a step whose
// outcome is not recorded yet.
func (p *pass) releaseSettled(ctx context.Context) {
	if len(p.settled) == 0 || p.e.trusted(p.run) != nil {
		return
	}
	pipe := p.pipe
	if pipe == nil {
		var err error
		if pipe, err = p.e.compiler.PipelineForRun(p.run); err != nil {
			return
		}
	}
	slices.Sort(p.settled)
	for _, name := range slices.Compact(p.settled) {
		ss := p.run.Status.Step(name)
		if ss == nil || len(ss.State) == 0 {
			continue
		}
		for _, step := range pipe.Steps {
			if r, ok := step.Action.(steps.Releaser); ok && step.Spec.Name == name {
				r.Release(ctx, p.input(ss))
			}
		}
	}
}

// input is what a step's action sees of the run.
func (p *pass) input(ss *v1alpha1.StepStatus) *steps.Input {
	in := &steps.Input{Run: p.run, Status: ss.DeepCopy(), Vars: p.vars(ss), PolicyNamespace: p.run.Spec.PolicyRef.Namespace, Now: p.now}
	if p.run.Spec.PolicyRef.Kind != policy.KindNamespaced {
		in.PolicyNamespace = ""
	}
	return in
}

// failCurrent fails the step in progress, if any.
func (p *pass) failCurrent(msg string) {
	for i := range p.run.Status.Steps {
		ss := &p.run.Status.Steps[i]
		if ss.Phase == v1alpha1.StepRunning {
			p.settled = append(p.settled, ss.Name)
			now := metav1.NewTime(p.now)
			ss.Phase, ss.Message, ss.CompletionTime, ss.NextCheckTime, ss.RetryTime = v1alpha1.StepFailed, msg, &now, nil, nil
		}
	}
}

// skipRemaining marks every step not yet finished as Skipped.
func (p *pass) skipRemaining(why string) {
	for i := range p.run.Status.Steps {
		ss := &p.run.Status.Steps[i]
		if !ss.Phase.Finished() {
			if ss.Phase == v1alpha1.StepRunning {
				p.settled = append(p.settled, ss.Name)
			}
			now := metav1.NewTime(p.now)
			ss.Phase, ss.Message, ss.CompletionTime, ss.NextCheckTime, ss.RetryTime = v1alpha1.StepSkipped, skippedPrefix+why, &now, nil, nil
		}
	}
}

// skippedPrefix starts the message of a step skipped because the pipeline ended before it (not
// by its guard): a retry resumes there.
const skippedPrefix = "skipped: "

// observe queues a metric observation until the pass's status is written.
func (p *pass) observe(f func()) { p.observations = append(p.observations, f) }

// roundAttempts counts a step's attempts since it last started (a retried run starts it again).
func roundAttempts(ss *v1alpha1.StepStatus) int32 {
	return ss.Attempts - max(ss.FirstAttempt, 1) + 1
}

func (p *pass) stepsDone() bool {
	for _, ss := range p.run.Status.Steps {
		if !ss.Phase.Finished() {
			return false
		}
	}
	return len(p.run.Status.Steps) > 0
}

// finish ends the run. The target is released after the final status is written (see
// runReconciler.cleanUp): a crash in between leaves a finished run that still holds its own
// finalizer, and the next reconcile completes the release.
func (p *pass) finish(phase v1alpha1.RunPhase, msg string) {
	st := &p.run.Status
	release := phase.Releases(p.run.Spec.Pipeline.FailurePolicy) && p.e.trusted(p.run) == nil
	now := metav1.NewTime(p.now)
	st.Phase, st.Message, st.CompletionTime = phase, msg, &now
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionComplete, Status: metav1.ConditionTrue,
		Reason: string(phase), Message: msg, ObservedGeneration: p.run.Generation})
	switch phase {
	case v1alpha1.RunSucceeded:
		p.note(false, ReasonSucceeded, "Teardown succeeded; finalizer %s removed", p.run.Spec.Finalizer)
	case v1alpha1.RunAbandoned:
		p.note(true, ReasonAbandoned, "Teardown abandoned by %s; finalizer %s removed", st.AbandonedBy, p.run.Spec.Finalizer)
	case v1alpha1.RunFailed:
		if release {
			p.note(true, ReasonFailed, "Teardown failed (%s); failurePolicy Release: finalizer %s removed", msg, p.run.Spec.Finalizer)
		} else {
			p.note(true, ReasonFailed, "Teardown failed (%s); failurePolicy Retain keeps the object: fix the cause and annotate run %s with %s to resume at the failed step, or set annotation %s on the object to release it without the rest of the cleanup",
				msg, p.run.Name, AnnotationRetry, AnnotationAbandon)
		}
	}
	if st.StartTime != nil {
		start, policyLabel := st.StartTime.Time, p.policyLabel()
		p.observe(func() {
			p.e.metrics.pipelineDuration.WithLabelValues(policyLabel, string(phase)).Observe(time.Since(start).Seconds())
		})
	}
}

// afterFinish handles a finished run that retains its target (failed under Retain): break glass
// releases it.
func (p *pass) afterFinish() {
	st := &p.run.Status
	if st.Phase.Releases(p.run.Spec.Pipeline.FailurePolicy) || p.target == nil {
		return
	}
	if who := p.breakGlass(); who != "" {
		st.AbandonedBy = who
		// The Failed condition stays True and the message keeps the failure: the cleanup did
		// not happen, and whoever looks later must see why.
		p.finish(v1alpha1.RunAbandoned, fmt.Sprintf("abandoned after failure by %s; the run had failed: %s", who, st.Message))
	}
}

// commit writes the run status if the pass changed it. The patch is locked to the version read,
// so a pass working from a stale cache cannot overwrite newer progress.
func (r *runReconciler) commit(ctx context.Context, p *pass) error {
	if equality.Semantic.DeepEqual(p.orig.Status, p.run.Status) {
		return nil
	}
	if err := r.client.Status().Patch(ctx, p.run, client.MergeFromWithOptions(p.orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	r.written.set(client.ObjectKeyFromObject(p.run), p.run.ResourceVersion)
	return nil
}

// trackWatches makes lookups' kinds watched while a run waits on them, and unwatched after.
func (r *runReconciler) trackWatches(req reconcile.Request, targets []steps.WatchTarget) {
	consumer := "run:" + req.String()
	for _, gvk := range r.lookups.set(req, targets) {
		r.watches.Release(gvk, consumer)
	}
	for _, t := range targets {
		if !r.watches.Held(t.GVK, consumer) {
			if _, err := r.watches.Acquire(t.GVK, consumer); err != nil {
				ctrl.Log.Info("cannot watch lookup kind; relying on the check interval", "kind", t.GVK.String(), "error", err.Error())
			}
		}
	}
}

// note queues an event for the run and its target, emitted once the status is written.
func (p *pass) note(warning bool, reason, format string, args ...any) {
	p.events = append(p.events, eventf(warning, reason, format, args...))
}

// stepNote queues an event about one step.
func (p *pass) stepNote(step string, warning bool, reason, format string, args ...any) {
	ev := eventf(warning, reason, format, args...)
	ev.action = "Step " + step
	p.events = append(p.events, ev)
}

func (p *pass) flushEvents(ctx context.Context) {
	for _, ev := range p.events {
		p.e.events.emit(ctx, p.run, nil, p.run.Namespace, ev)
		if p.target != nil {
			p.e.events.emit(ctx, targetRef(p.tkey, p.target), p.run, p.tkey.Namespace, ev)
		}
	}
}

// vars binds object, steps and run for one step's expressions.
func (p *pass) vars(ss *v1alpha1.StepStatus) expr.Vars {
	if p.object == nil {
		p.object = map[string]any{}
		if len(p.run.Spec.Object.Raw) > 0 {
			_ = json.Unmarshal(p.run.Spec.Object.Raw, &p.object)
		}
	}
	stepsVar := make(map[string]any, len(p.run.Status.Steps))
	for _, s := range p.run.Status.Steps {
		outputs := make(map[string]any, len(s.Outputs))
		for k, v := range s.Outputs {
			var x any
			if json.Unmarshal(v.Raw, &x) == nil {
				outputs[k] = x
			}
		}
		stepsVar[s.Name] = map[string]any{"phase": string(s.Phase), "outputs": outputs, "message": s.Message}
	}
	return expr.Vars{
		expr.VarObject: p.object,
		expr.VarSteps:  stepsVar,
		expr.VarRun: map[string]any{
			"name": p.run.Name, "namespace": p.run.Namespace, "uid": string(p.run.UID),
			"attempt": int64(ss.Attempts), "step": ss.Name,
		},
	}
}

func (p *pass) policyLabel() string {
	ref := p.run.Spec.PolicyRef
	return policy.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}.String()
}

func (p *pass) capAtDeadline(res reconcile.Result) reconcile.Result {
	if d := p.run.Status.Deadline; d != nil {
		if left := d.Sub(p.now); res.RequeueAfter == 0 || left < res.RequeueAfter {
			res.RequeueAfter = max(left, time.Millisecond)
		}
	}
	return res
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
