package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/ownwrites"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// runStart is a deletion's run as the target side hands it to the run side to start.
type runStart struct {
	run    *v1alpha1.TeardownRun
	policy *policy.Compiled
	key    TargetKey
	// target is the object's metadata: as the API server has it, or the cache's (plan.FromCache).
	target *metav1.PartialObjectMetadata
	// requested says who requests a two-phase run's deletion.
	requested string
	plan      startPlan
}

// start runs a new run's first pass before the run is recorded, then records it in one create,
// status included, and releases the target if the pass ended the teardown (planRecord decides).
// A pipeline that ends at once so costs two writes (the run, the release) instead of four; with
// spec.runHistory SkipImmediateSuccess (the default), one that succeeds at once costs the release alone. A crash after the
// pass and before its record repeats the pass: its side effects are keyed on the deletion, not on
// the run (an http step's Idempotency-Key), and a step that needs the run recorded (a Job step)
// stops the pass before it starts. A shutdown does not lose the record (see recording).
func (r *runReconciler) start(ctx context.Context, s runStart) error {
	if !s.plan.FromCache && s.plan.Moved && r.existingRun(ctx, s.key, s.run.Name) {
		return nil // made before the namespace's deletion began: it goes on
	}
	run, c := s.run, s.policy
	p := &pass{orig: run.DeepCopy(), run: run, tkey: s.key, target: s.target, pipe: c.Pipeline}
	facts := pipeline.Facts{Now: time.Now(), Pipeline: c.Pipeline, Unborn: true, BreakGlass: r.breakGlass(ctx, run, s.target), Requested: s.requested,
		TargetDeleting: s.target.DeletionTimestamp != nil}
	p.out = pipeline.Advance(ctx, run, facts)
	ctx, cancel := recording(ctx)
	defer cancel()
	plan := planRecord(recordFacts{Phase: run.Status.Phase, FailurePolicy: c.Pipeline.FailurePolicy, RecordsEveryRun: c.RecordsEveryRun(),
		TwoPhase: c.TwoPhase(), CleanSuccess: cleanSuccess(run), FromCache: s.plan.FromCache})
	if plan.HoldFinalizer {
		controllerutil.AddFinalizer(run, v1alpha1.FinalizerRun)
	}
	if plan.LabelReleased {
		run.Labels[v1alpha1.LabelReleased] = "true" // a record from the start: never cached
	}
	switch {
	case plan.ReadSnapshot:
		if ok, err := r.readSnapshot(ctx, s); err != nil || !ok {
			return err
		}
	case plan.Record && s.plan.FromCache && len(run.Spec.Object.Raw) == 0:
		// A record of a pass that read nothing of the object: what the cache knows of it says
		// what was deleted.
		raw, err := json.Marshal(s.target)
		if err != nil {
			return fmt.Errorf("encoding the metadata of %s: %w", s.key, err)
		}
		run.Spec.Object.Raw = raw
	}
	if plan.Record {
		if created, err := r.record(ctx, run); err != nil || !created {
			return err
		}
	}
	p.eventsOn, p.unrecorded = plan.EventsOn, !plan.Record
	switch plan.EventsOn {
	case eventsOnPolicy:
		policyEvents(p, c, plan.Record)
	case eventsOnTarget:
		for i := range p.out.Events {
			p.out.Events[i].Note += fmt.Sprintf(" (TeardownRun %s/%s)", run.Namespace, run.Name)
		}
	}
	if plan.ReleaseNow {
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

// readSnapshot adds the object's snapshot to a run whose first pass started from the cached
// metadata, before it is recorded. It reports false when there is nothing to record: the object
// no longer carries the run's finalizer (released meanwhile), or the run exists already in the
// object's namespace, made before that namespace's deletion began (it goes on).
func (r *runReconciler) readSnapshot(ctx context.Context, s runStart) (bool, error) {
	if s.plan.Moved && r.existingRun(ctx, s.key, s.run.Name) {
		return false, nil
	}
	full, err := readObject(ctx, r.reader, s.key)
	if err != nil || full == nil {
		return false, err
	}
	live := &unstructured.Unstructured{Object: full}
	if !carries(live, s.target.UID, s.policy.Finalizer) {
		return false, nil
	}
	return true, snapshotWithin(s.run, full)
}

// snapshotWithin adds the object's snapshot to a run whose first pass ran without it. Should it
// take the run past what etcd stores (the pass checked step outputs against the run as it was,
// with the cached metadata alone), the run keeps that metadata as its snapshot.
func snapshotWithin(run *v1alpha1.TeardownRun, full map[string]any) error {
	snapshot, err := policy.Snapshot(full)
	if err != nil {
		return err
	}
	meta := run.Spec.Object.Raw
	run.Spec.Object.Raw = snapshot
	if b, err := json.Marshal(run); err == nil && len(b) > pipeline.MaxRunBytes {
		run.Spec.Object.Raw = meta
	}
	return nil
}

// existingRun reports whether the run named name exists in the target's namespace (created before
// the namespace's deletion began), and passes it to the run controller if so.
func (r *runReconciler) existingRun(ctx context.Context, key TargetKey, name string) bool {
	if key.Namespace == "" {
		return false
	}
	existing := &v1alpha1.TeardownRun{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, existing); err != nil {
		return false
	}
	r.requeue.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(existing)})
	return true
}

// recordedHere reports whether this engine recorded the run of policy c for the target and has
// not seen it gone. The cache may not hold its create yet: a target reconcile in that window that
// started the run again would repeat the steps of its first pass, recorded done.
func (r *runReconciler) recordedHere(c *policy.Compiled, key TargetKey, uid types.UID) bool {
	name := naming.RunName(c.Key.Kind, c.Key.Namespace, c.Key.Name, key.Name, uid)
	for _, ns := range []string{key.Namespace, r.runNamespace} {
		if ns != "" && r.written.Known(types.NamespacedName{Namespace: ns, Name: name}) {
			return true
		}
	}
	return false
}

// record creates the run, then writes the status of its first pass through the status subresource
// (the create drops it). In a namespace being deleted, where nothing can be created, it goes to
// the run namespace. It reports false when the run was there already with a status (the pass was
// a repeat, after a crash or a stale cache): that run goes on. A run there without a status was
// created by a pass that stopped before its status write: this pass, the same deletion's first,
// writes it.
func (r *runReconciler) record(ctx context.Context, run *v1alpha1.TeardownRun) (bool, error) {
	status := run.Status.DeepCopy()
	err := r.client.Create(ctx, run)
	if apierrors.HasStatusCause(err, "NamespaceTerminating") && run.Namespace != r.runNamespace {
		run.Namespace = r.runNamespace
		run.ResourceVersion = ""
		err = r.client.Create(ctx, run)
	}
	switch {
	case apierrors.IsAlreadyExists(err):
		if adopted, err := r.adoptUnwritten(ctx, run, status); adopted || err != nil {
			return adopted, err
		}
		return false, r.recorded(ctx, client.ObjectKeyFromObject(run))
	case err != nil:
		return false, fmt.Errorf("recording run %s/%s: %w", run.Namespace, run.Name, err)
	}
	if run.Labels[v1alpha1.LabelReleased] == "" {
		r.written.Set(client.ObjectKeyFromObject(run), run.ResourceVersion) // its create event finds it known
	}
	return true, r.writeFirstStatus(ctx, run, status)
}

// writeFirstStatus writes a just created run's status. Until it is written the run says nothing
// (Phase ""), and the run controller leaves it alone (unwrittenGrace): a crash in between leaves
// a run that the next pass of its deletion adopts.
func (r *runReconciler) writeFirstStatus(ctx context.Context, run *v1alpha1.TeardownRun, status *v1alpha1.TeardownRunStatus) error {
	key := client.ObjectKeyFromObject(run)
	run.Status = *status
	err := r.client.Status().Update(ctx, run)
	// On a failure the run is there; its next pass (the run controller's, or this deletion's
	// again, which adopts it) starts it from the beginning, as a crash here would.
	version := ownwrites.Unknown
	if err == nil {
		version = run.ResourceVersion
	}
	if run.Labels[v1alpha1.LabelReleased] == "" {
		r.written.Set(key, version)
	} else {
		r.written.Forget(key) // a record, never cached: nothing would ever forget it
	}
	if err != nil {
		return fmt.Errorf("recording the status of run %s/%s: %w", run.Namespace, run.Name, err)
	}
	return nil
}

// adoptUnwritten takes over a run of this deletion that exists without a status: its creator
// stopped between the create and the status write. It reports whether it wrote this pass's
// status to it.
func (r *runReconciler) adoptUnwritten(ctx context.Context, run *v1alpha1.TeardownRun, status *v1alpha1.TeardownRunStatus) (bool, error) {
	existing := &v1alpha1.TeardownRun{}
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(run), existing); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if existing.Status.Phase != "" || existing.Spec.Target.UID != run.Spec.Target.UID || trusted(r.runNamespace, existing) != nil {
		return false, nil
	}
	if err := r.writeFirstStatus(ctx, existing, status); err != nil {
		return false, err
	}
	existing.DeepCopyInto(run)
	return true, nil
}

// recorded handles a run that was there already: one the run controller follows, or a record
// whose creator stopped before it released the target (a crash): then the release is done here.
func (r *runReconciler) recorded(ctx context.Context, key client.ObjectKey) error {
	existing := &v1alpha1.TeardownRun{}
	if err := r.reader.Get(ctx, key, existing); err != nil {
		return client.IgnoreNotFound(err)
	}
	switch {
	case trusted(r.runNamespace, existing) == nil && falselyReleased(existing):
		return r.unlabelReleased(ctx, existing)
	case trusted(r.runNamespace, existing) != nil || !releasedRecord(existing):
		r.requeue.Add(reconcile.Request{NamespacedName: key})
		return nil
	}
	wait, err := r.releaseTarget(ctx, existing)
	if err == nil && wait > 0 {
		// A record made by a version that deleted two-phase objects at their start: looked at again.
		return fmt.Errorf("run %s: its object's deletion waits for its veto to be lifted", key)
	}
	return err
}

// unlabelReleased removes the released label from a run whose status says its teardown goes on:
// someone else set it (the operator labels a run released only once it released its object).
// Left there, it would keep the run out of the cache and its pipeline stopped.
func (r *runReconciler) unlabelReleased(ctx context.Context, run *v1alpha1.TeardownRun) error {
	path := "/metadata/labels/" + jsonPointerEscape(v1alpha1.LabelReleased)
	data, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": run.UID},
		{"op": "test", "path": path, "value": run.Labels[v1alpha1.LabelReleased]},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("a run labelled released by someone else goes on: its status says its teardown is not done; label removed",
		"run", client.ObjectKeyFromObject(run).String(), "phase", run.Status.Phase)
	if err := r.client.Patch(ctx, run, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return fmt.Errorf("removing label %s from run %s/%s: %w", v1alpha1.LabelReleased, run.Namespace, run.Name, err)
	}
	return nil
}

// releasesObject reports whether a run's status says its pipeline ended in a phase that lets its
// object go.
func releasesObject(run *v1alpha1.TeardownRun) bool {
	return run.Status.Phase.Finished() && run.Status.Phase.Releases(run.Spec.Pipeline.FailurePolicy)
}

// releasedRecord reports whether a run is the record of a teardown that released its object: the
// operator labelled it released, and its status (which only the operator writes) says so. The
// label alone, which whoever may patch runs can set, is not enough.
func releasedRecord(run *v1alpha1.TeardownRun) bool {
	return run.Labels[v1alpha1.LabelReleased] != "" && releasesObject(run)
}

// falselyReleased reports whether a run is labelled released while its status says its teardown
// goes on: someone else set the label, which unlabelReleased takes back.
func falselyReleased(run *v1alpha1.TeardownRun) bool {
	return run.Labels[v1alpha1.LabelReleased] != "" && run.Status.Phase != "" && !releasesObject(run)
}

// policyEvents sends a pass that succeeded at once to its policy, as one event that the events
// library folds, with every such teardown of the policy, into a series: its count is how many
// objects were so released. The run, when one is kept (runHistory All), is the record of each;
// each is also logged.
func policyEvents(p *pass, c *policy.Compiled, recorded bool) {
	ref := metaRef(v1alpha1.GroupVersion.WithKind(c.Key.Kind), c.Key.Namespace, c.Key.Name)
	ref.SetUID(c.UID)
	p.policyRef, p.eventsOn = ref, eventsOnPolicy
	t := p.run.Spec.Target
	action, note := "ReleasedWithoutRun", "Objects whose teardown succeeds at once are released without a TeardownRun (runHistory SkipImmediateSuccess); this series counts them. The first: %s"
	if recorded {
		action, note = "ReleasedAtOnce", "Objects whose teardown succeeds at once are released in its first pass, each recorded by a TeardownRun (runHistory All); this series counts them. The first: %s"
	}
	p.out.Events = []pipeline.Event{{Reason: v1alpha1.ReasonSucceeded, Action: action, Note: fmt.Sprintf(note, targetName(t))}}
}

// cleanSuccess reports whether a run succeeded with no step failed (onFailure Continue lets a
// pipeline succeed past a failed step: runHistory SkipImmediateSuccess records that one).
func cleanSuccess(run *v1alpha1.TeardownRun) bool {
	if run.Status.Phase != v1alpha1.RunSucceeded {
		return false
	}
	for _, ss := range run.Status.AllSteps() {
		if ss.Phase == v1alpha1.StepFailed {
			return false
		}
	}
	return true
}
