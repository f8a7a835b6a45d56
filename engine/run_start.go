package engine

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// birth runs a new run's first pass before the run is recorded, then records it in one create,
// status included, and releases the target if the pass ended the teardown. A pipeline that ends
// at once so costs two writes (the run, the release) instead of four; with spec.runHistory
// OnFailure, one that succeeds at once costs the release alone. A crash after the pass and before
// its record repeats the pass: its side effects are keyed on the deletion, not on the run (an
// http step's Idempotency-Key), and a step that needs the run recorded (a Job step) stops the
// pass before it starts. A run born without its target's snapshot gets it from snapshot before
// it is recorded (false: the target was released meanwhile, nothing to record).
func (r *runReconciler) birth(ctx context.Context, run *v1alpha1.TeardownRun, c *policy.Compiled, tkey TargetKey, target *metav1.PartialObjectMetadata, requested string, snapshot snapshotFunc) error {
	p := &pass{orig: run.DeepCopy(), run: run, tkey: tkey, target: target, pipe: c.Pipeline}
	facts := pipeline.Facts{Now: time.Now(), Pipeline: c.Pipeline, Unborn: true, BreakGlass: r.breakGlass(run, target), Requested: requested,
		TargetDeleting: target.DeletionTimestamp != nil}
	p.out = pipeline.Advance(ctx, run, facts)
	phase := run.Status.Phase
	releases := phase.Finished() && phase.Releases(c.Pipeline.FailurePolicy)
	// A two-phase run that ends at once still has its object to delete, which waits for the
	// veto to be lifted (deleteTarget): the run controller does it, as for any run in flight.
	deletes := releases && c.TwoPhase() && phase != v1alpha1.RunAbandoned
	switch {
	case !phase.Finished() || deletes || !releases:
		// Its own finalizer marks a run that still owes something: a pipeline in flight, an
		// object to delete, or (failed under Retain) a teardown still owed, kept until it is
		// retried to success or abandoned, so that deleting the run by hand loses nothing.
		controllerutil.AddFinalizer(run, v1alpha1.FinalizerRun)
	case releases:
		run.Labels[v1alpha1.LabelReleased] = "true" // a record from the start: never cached
	}
	recorded := c.RecordsEveryRun() || !cleanSuccess(run)
	if recorded && snapshot != nil {
		if ok, err := snapshot(ctx, run); err != nil || !ok {
			return err
		}
	}
	if recorded {
		if created, err := r.record(ctx, run); err != nil || !created {
			return err
		}
	}
	switch {
	case !recorded:
		unrecordedEvents(p, c)
	case phase == v1alpha1.RunSucceeded:
		// The object goes at once and the run's status tells it all: one event, on the object,
		// naming the run.
		p.eventsOn = eventsOnTarget
		for i := range p.out.Events {
			p.out.Events[i].Note += fmt.Sprintf(" (TeardownRun %s/%s)", run.Namespace, run.Name)
		}
	}
	if releases && !deletes {
		// Released after the record is written, as any run: a crash in between leaves a
		// finished run, found by the next pass's create (record).
		if _, err := r.releaseTarget(ctx, run); err != nil {
			return err
		}
	}
	// A run that goes on is passed again when its creation reaches the cache (the run
	// controller's create event): woken earlier, the reconcile would find no run there.
	res := reconcile.Result{RequeueAfter: p.out.RequeueAfter}
	r.apply(ctx, p, &res)
	return nil
}

// snapshotFunc adds its target's snapshot to a run about to be recorded; false means the target
// no longer carries the run's finalizer.
type snapshotFunc func(ctx context.Context, run *v1alpha1.TeardownRun) (bool, error)

// recordedHere reports whether this engine recorded the run of policy c for the target and has
// not seen it gone. The cache may not hold its create yet: a target reconcile in that window that
// passed the run's birth again would repeat the steps of its first pass, recorded done.
func (r *runReconciler) recordedHere(c *policy.Compiled, key TargetKey, uid types.UID) bool {
	name := naming.RunName(c.Key.Kind, c.Key.Namespace, c.Key.Name, key.Name, uid)
	for _, ns := range []string{key.Namespace, r.runNamespace} {
		if ns != "" && r.written.Known(types.NamespacedName{Namespace: ns, Name: name}) {
			return true
		}
	}
	return false
}

// record creates the run with the status of its first pass. In a namespace being deleted,
// where nothing can be created, it goes to the run namespace. It reports false when the run
// was there already (the pass was a repeat, after a crash or a stale cache): that run goes on.
func (r *runReconciler) record(ctx context.Context, run *v1alpha1.TeardownRun) (bool, error) {
	err := r.client.Create(ctx, run)
	if apierrors.HasStatusCause(err, "NamespaceTerminating") && run.Namespace != r.runNamespace {
		run.Namespace = r.runNamespace
		run.ResourceVersion = ""
		err = r.client.Create(ctx, run)
	}
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, r.recorded(ctx, client.ObjectKeyFromObject(run))
	case err != nil:
		return false, fmt.Errorf("recording run %s/%s: %w", run.Namespace, run.Name, err)
	}
	if run.Labels[v1alpha1.LabelReleased] == "" {
		r.written.Set(client.ObjectKeyFromObject(run), run.ResourceVersion)
	}
	return true, nil
}

// recorded handles a run that was there already: one the run controller follows, or a record
// whose creator stopped before it released the target (a crash): then the release is done here.
func (r *runReconciler) recorded(ctx context.Context, key client.ObjectKey) error {
	existing := &v1alpha1.TeardownRun{}
	if err := r.reader.Get(ctx, key, existing); err != nil {
		return client.IgnoreNotFound(err)
	}
	if existing.Labels[v1alpha1.LabelReleased] == "" || trusted(r.runNamespace, existing) != nil {
		r.wake.runs.Add(reconcile.Request{NamespacedName: key})
		return nil
	}
	wait, err := r.releaseTarget(ctx, existing)
	if err == nil && wait > 0 {
		// A record made by a version that deleted two-phase objects at birth: looked at again.
		return fmt.Errorf("run %s: its object's deletion waits for its veto to be lifted", key)
	}
	return err
}

// unrecordedEvents sends a pass whose run is not kept (runHistory OnFailure, succeeded at once) to
// its policy, as one event that the events library folds, with every such teardown of the
// policy, into a series: its count is how many objects were so released. Each is also logged.
func unrecordedEvents(p *pass, c *policy.Compiled) {
	ref := metaRef(v1alpha1.GroupVersion.WithKind(c.Key.Kind), c.Key.Namespace, c.Key.Name)
	ref.SetUID(c.UID)
	p.policyRef, p.eventsOn = ref, eventsOnPolicy
	t := p.run.Spec.Target
	p.out.Events = []pipeline.Event{{Reason: v1alpha1.ReasonSucceeded, Action: "ReleasedWithoutRun",
		Note: fmt.Sprintf("Objects whose teardown succeeds at once are released without a TeardownRun (runHistory OnFailure); this series counts them. The first: %s",
			targetName(t))}}
}

// cleanSuccess reports whether a run succeeded with no step failed (onFailure Continue lets a
// pipeline succeed past a failed step: runHistory OnFailure records that one).
func cleanSuccess(run *v1alpha1.TeardownRun) bool {
	if run.Status.Phase != v1alpha1.RunSucceeded {
		return false
	}
	for _, ss := range run.Status.Steps {
		if ss.Phase == v1alpha1.StepFailed {
			return false
		}
	}
	return true
}
