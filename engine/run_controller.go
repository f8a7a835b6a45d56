package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/eventsink"
	"github.com/teardown-dev/teardown-operator/engine/ownwrites"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
	"github.com/teardown-dev/teardown-operator/steps"
)

// runReconciler advances one run's pipeline per reconcile, as far as it can go without waiting:
// it reads the world (the run, its target, break glass, its compiled pipeline), lets the pure
// state machine (engine/pipeline) decide, writes the status, and only then applies the effects.
type runReconciler struct {
	client client.Client
	// reader reads from the API server what the caches may not show yet.
	reader   client.Reader
	policies runPolicies
	watches  *watch.Manager
	events   *eventsink.Sink
	// reports are the pass's metrics and the ends of teardowns, for their policies' history.
	reports passReports
	// written and released are what the run side wrote that the caches may not show yet: run
	// versions, and finalizers released from targets (see ownwrites).
	written  *ownwrites.Versions[types.NamespacedName]
	released *ownwrites.Releases[TargetKey]
	// lookups records what runs' steps look up, to be woken (lookupEvents).
	lookups      *interest[reconcile.Request]
	kinds        steps.Registry
	runNamespace string
	retention    time.Duration
	// stuckAfter is when a run counts as stuck, after its creation: its onStuck steps run then.
	stuckAfter time.Duration
	fin        *finalizerWriter
	// requeue is the run controller's own queue.
	requeue queue[reconcile.Request]
	reads   clusterReads
	// lead says since when this process leads (see leadership.predates).
	lead *leadership
}

// runPolicies is what the run side needs of the compiled policies: a policy's state, and the
// pipeline a run was started with (compiled again from the run if its policy changed since).
type runPolicies interface {
	Get(key policy.Key) *policy.Compiled
	PipelineForRun(run *v1alpha1.TeardownRun) (*policy.Pipeline, error)
}

// compiledPolicies joins the registry and the compiler into runPolicies.
type compiledPolicies struct {
	*policy.Registry
	*policy.Compiler
}

// pass is one reconcile of a run: the run as read and as edited, and what was read of its target.
type pass struct {
	orig   *v1alpha1.TeardownRun // as read; never modified
	run    *v1alpha1.TeardownRun // a deep copy, edited by the pipeline
	tkey   TargetKey
	target *metav1.PartialObjectMetadata // nil once the target is gone (or not read: released)
	pipe   *policy.Pipeline
	out    pipeline.Effects
	// eventsOn says where the pass's events go: the run and its target, unless the run's start says
	// otherwise.
	eventsOn eventPlace
	// policyRef is the policy, for events on it (eventsOnPolicy).
	policyRef runtime.Object
	// unrecorded is set for a first pass whose run is not kept (runHistory SkipImmediateSuccess).
	unrecorded bool
	// unwritten is set when commit found nothing to write: the pass's events then name the run
	// at a version an earlier pass wrote, and the same pass may come again (see eventsink.Sink.EmitOnRun).
	unwritten bool
}

// eventPlace is where a pass records its events.
type eventPlace int

const (
	// eventsOnRunAndTarget: on the run, and on its target while it exists.
	eventsOnRunAndTarget eventPlace = iota
	// eventsOnTarget: on the target alone (a run recorded finished has its status to tell it).
	eventsOnTarget
	// eventsOnPolicy: on the policy, where the events library folds them into one series (a
	// teardown that succeeded at once and was not recorded: runHistory SkipImmediateSuccess).
	eventsOnPolicy
)

func (r *runReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cached, err := r.readRun(ctx, req.NamespacedName)
	if err != nil || cached == nil {
		return reconcile.Result{}, err
	}
	if wait := unwrittenWait(cached, time.Now()); wait > 0 && trusted(r.runNamespace, cached) == nil {
		// Looked at again soon: the status is normally written a moment after the create, and
		// its write does not wake this controller. (A run that cannot be trusted is rejected at
		// once: the operator did not make it.)
		return reconcile.Result{RequeueAfter: min(wait, conflictRetry)}, nil
	}
	p, facts, err := r.read(ctx, cached)
	if err != nil {
		return reconcile.Result{}, err
	}
	p.out = pipeline.Advance(ctx, p.run, facts)
	ctx, cancel := recording(ctx)
	defer cancel()
	if err := r.commit(ctx, p); err != nil {
		r.written.Set(req.NamespacedName, ownwrites.Unknown)
		return reconcile.Result{}, fmt.Errorf("writing status: %w", err)
	}
	res := reconcile.Result{RequeueAfter: p.out.RequeueAfter}
	r.apply(ctx, p, &res)
	if p.run.Status.Phase.Finished() {
		done, err := r.cleanUp(ctx, p.run)
		if res.RequeueAfter > 0 && (p.out.ClearRetry != "" || p.out.RequeueAfter > 0) {
			// The retry annotation is still to be removed, or a failed run that keeps its object
			// has onStuck steps to run.
			done = earliest(done, res)
		}
		return done, err
	}
	return res, nil
}

// unwrittenGrace is how long a run created without its status yet (Phase "") is left to its
// deletion's first pass, which writes the status, or adopts the run after a crash or a failed
// write (runReconciler.record). A pass of the run controller meanwhile would run the steps beside
// it, and call again what that pass is recording. Past it, the run controller takes the run over:
// a deletion that is not passed again (its object gone, say) must not leave the run as it is.
const unwrittenGrace = 30 * time.Second

// unwrittenWait is how long the run controller leaves run alone: until unwrittenGrace after its
// creation while it has no status, else 0.
func unwrittenWait(run *v1alpha1.TeardownRun, now time.Time) time.Duration {
	if run.Status.Phase != "" {
		return 0
	}
	return max(0, run.CreationTimestamp.Add(unwrittenGrace).Sub(now))
}

// recordTimeout bounds the writes that record a pass once a shutdown has begun.
const recordTimeout = 10 * time.Second

// recording returns the context for the writes that record a pass and carry out its effects. A
// pass may have made side effects (an http call answered, a Job created): its record must not be
// lost to the shutdown of a rollout, which cancels ctx while the manager waits for its workers, or
// the next replica would do them again. So the writes outlive ctx's cancellation, for at most
// recordTimeout (the manager waits 30 s for its workers).
func recording(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
}

// read gathers what one pass decides on: the target's metadata, break glass, the compiled
// pipeline, trust and a retry request.
func (r *runReconciler) read(ctx context.Context, cached *v1alpha1.TeardownRun) (*pass, pipeline.Facts, error) {
	t := cached.Spec.Target
	p := &pass{orig: cached, run: cached.DeepCopy(), tkey: targetKeyOf(t)}
	facts := pipeline.Facts{Now: time.Now(), Rejected: trusted(r.runNamespace, cached)}
	if r.stuckAfter > 0 {
		facts.StuckAt = cached.CreationTimestamp.Add(r.stuckAfter)
	}
	if v := cached.Annotations[v1alpha1.AnnotationRetry]; v != "" {
		facts.Retry = v
		req, _ := r.reads.readRequest(ctx, cached, v1alpha1.AnnotationRetry)
		facts.RetryBy, facts.RetryAt, facts.RetryUntrusted = req.user, req.at, req.untrusted
	}
	if releasesObject(cached) {
		facts.TargetGone = true // done with its target; cleanUp reads what it needs
		return p, facts, nil
	}
	// A cancelled two-phase run restarts on a new request, whose author the record names.
	authors := cached.Spec.Trigger == v1alpha1.TriggerDeleteRequest && cached.Status.Phase == v1alpha1.RunCancelled
	target, err := r.readTarget(ctx, p.tkey, t.UID, authors)
	if err != nil {
		return nil, facts, err
	}
	p.target, facts.TargetGone = target, target == nil
	facts.BreakGlass = r.breakGlass(ctx, cached, target)
	if target != nil {
		facts.TargetDeleting = target.DeletionTimestamp != nil
		if cached.Spec.Trigger == v1alpha1.TriggerDeleteRequest {
			// A cancelled run restarts on a new request, read live (authors) and verified.
			facts.Requested, _ = r.reads.deleteRequest(ctx, target, authors)
		}
	}
	// Every run still holding its object may end (again): a retry or a new request runs its steps,
	// break glass its finally steps.
	if facts.Rejected == nil {
		p.pipe, facts.CompileErr = r.policies.PipelineForRun(cached)
		facts.Pipeline = p.pipe
	}
	return p, facts, nil
}

// apply carries out a written pass's effects: metrics, logs, the retry annotation's removal,
// events, releases of ended attempts, and watches. Only what is written is applied, so a pass
// redone after a write conflict counts once.
func (r *runReconciler) apply(ctx context.Context, p *pass, res *reconcile.Result) {
	r.reports.observe(p.run, p.out.Observations)
	r.reports.ended(p.orig, p.run, !p.unrecorded, trusted(r.runNamespace, p.run) != nil)
	logTransitions(ctx, p.orig, p.run, !p.unrecorded)
	if p.out.ClearRetry != "" {
		if err := r.clearRetryAnnotation(ctx, p.run, p.out.ClearRetry); err != nil {
			ctrl.LoggerFrom(ctx).Info("cannot remove the retry annotation yet", "error", err.Error())
			*res = earliest(*res, reconcile.Result{RequeueAfter: conflictRetry})
		}
	}
	r.flushEvents(ctx, p)
	r.releaseSettled(ctx, p)
	r.trackWatches(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p.run)}, p.out.Watch)
}

// flushEvents records a written pass's events on the run and on its target.
func (r *runReconciler) flushEvents(ctx context.Context, p *pass) {
	for _, ev := range p.out.Events {
		switch p.eventsOn {
		case eventsOnPolicy:
			r.events.Emit(ctx, p.policyRef, nil, p.run.Spec.PolicyRef.Namespace, ev)
		case eventsOnTarget:
			r.events.EmitFinal(ctx, objectRef(p.tkey, p.target), ev)
		case eventsOnRunAndTarget:
			r.events.EmitOnRun(ctx, p.run, objectRef(p.tkey, p.target), ev, !p.unwritten)
		}
	}
}

// releaseSettled lets the actions of steps whose attempt ended in the pass release what the
// attempt made. It runs after the status is written, so nothing is released for a step whose
// outcome is not recorded yet.
func (r *runReconciler) releaseSettled(ctx context.Context, p *pass) {
	if len(p.out.Settled) == 0 || trusted(r.runNamespace, p.run) != nil {
		return
	}
	pipe := p.pipe
	if pipe == nil {
		var err error
		if pipe, err = r.policies.PipelineForRun(p.run); err != nil {
			return
		}
	}
	settled := slices.Compact(slices.Sorted(slices.Values(p.out.Settled)))
	now := time.Now()
	for _, step := range pipe.All() {
		rel, ok := step.Action.(steps.Releaser)
		ss := p.run.Status.Step(step.Spec.Name)
		if ok && ss != nil && len(ss.State) > 0 && slices.Contains(settled, step.Spec.Name) {
			rel.Release(ctx, pipeline.Input(p.run, ss, now))
		}
	}
}

// readRun reads a run from the cache, or from the API server when the cache may not hold this
// engine's last write to it (see ownwrites.Versions). It returns nil once the run is gone, or is a
// record only (labelled released: nothing is left to do for it).
func (r *runReconciler) readRun(ctx context.Context, key types.NamespacedName) (*v1alpha1.TeardownRun, error) {
	run := &v1alpha1.TeardownRun{}
	err := r.client.Get(ctx, key, run)
	// A run this engine wrote and the cache misses may be newer than the cache (just created):
	// asked of the API server, so that it is not taken for gone and forgotten.
	missed := apierrors.IsNotFound(err) && r.written.Known(key)
	// A run this engine has neither written nor read yet was written by a predecessor (a replica
	// that stopped, an earlier leader), and the cache may show it as it was: a first list served
	// from the past ("time travel", behind a lagging API server) would have the pass repeat steps
	// recorded since. It is read from the API server once; from then on it is as if written here.
	inherited := err == nil && !r.written.Known(key)
	if missed || inherited || err == nil && r.written.Stale(key, run.ResourceVersion) {
		run = &v1alpha1.TeardownRun{} // decoding into the cached copy would keep its stale map entries
		err = r.reader.Get(ctx, key, run)
		if inherited && err == nil && run.Labels[v1alpha1.LabelReleased] == "" {
			r.written.Set(key, run.ResourceVersion)
		}
	}
	gone := apierrors.IsNotFound(err)
	if gone && missed {
		// Neither the cache nor the API server has it. (A run the cache still holds an older
		// version of is forgotten when the cache lets it go: see forgetRun.)
		r.written.Forget(key)
	}
	if err == nil && falselyReleased(run) && trusted(r.runNamespace, run) == nil {
		// Labelled released by someone else while its teardown goes on: the label is taken
		// back, and the run, cached again, passed again.
		return nil, r.unlabelReleased(ctx, run)
	}
	if gone || err == nil && run.Labels[v1alpha1.LabelReleased] != "" {
		r.trackWatches(reconcile.Request{NamespacedName: key}, nil)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return run, nil
}

// forgetRun drops what this engine remembers of a run's last write once the cache has let the
// run go (deleted, or labelled released): the cache serves no version of it any more, so no
// reconcile can take an older one for the latest. A run that left the cache while its status
// says it goes on was deleted by hand, or labelled released by someone else: it is read again
// from the API server (readRun takes such a label back).
func (r *runReconciler) forgetRun(_ context.Context, ev event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	key := client.ObjectKeyFromObject(ev.Object)
	// The event may carry the run as the cache last had it, before the label: its status says
	// whether it had released its object.
	if run, ok := ev.Object.(*v1alpha1.TeardownRun); ok && !ev.DeleteStateUnknown && run.Status.Phase != "" && !releasesObject(run) {
		r.written.Set(key, ownwrites.Unknown)
		r.requeue.Add(reconcile.Request{NamespacedName: key})
		return
	}
	r.written.Forget(key)
}

// readTarget returns the target's metadata, or nil once it is gone. The metadata informer serves
// it; the API server is asked only when the cache misses it (gone, or not watched), when the
// break-glass annotation is set, and (authors) when a delete request is: their authors are in
// the managed fields the cache drops.
func (r *runReconciler) readTarget(ctx context.Context, key TargetKey, uid types.UID, authors bool) (*metav1.PartialObjectMetadata, error) {
	if m, ok := r.watches.Get(key.GVK(), key.Namespace, key.Name); ok && m.UID == uid && m.Annotations[v1alpha1.AnnotationAbandon] == "" {
		if _, requested := m.Annotations[v1alpha1.AnnotationDeleteRequested]; !authors || !requested {
			return m, nil
		}
	}
	live := metaRef(key.GVK(), key.Namespace, key.Name)
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, live)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case meta.IsNoMatchError(err):
		// Not served (a CRD without this version, for now): the object may well still be there.
		// Nothing is decided on it; the run waits with backoff until the kind is served again.
		return nil, fmt.Errorf("reading target %s: its kind is not served: %w", key, err)
	case err != nil:
		return nil, fmt.Errorf("reading target %s: %w", key, err)
	case live.UID != uid:
		return nil, nil
	}
	return live, nil
}

// commit writes the run status if the pass changed it, through the status subresource. The patch
// is locked to the version read, so a pass working from a stale cache cannot overwrite newer
// progress. A run that goes on holds its own finalizer (v1alpha1.FinalizerRun), added before its
// status is written: deleting its namespace must not take it before it releases its target.
func (r *runReconciler) commit(ctx context.Context, p *pass) error {
	if equality.Semantic.DeepEqual(p.orig.Status, p.run.Status) {
		p.unwritten = true
		return nil
	}
	if !p.run.Status.Phase.Finished() && p.run.DeletionTimestamp == nil && !slices.Contains(p.run.Finalizers, v1alpha1.FinalizerRun) {
		if err := r.holdRun(ctx, p.run); err != nil {
			return err
		}
	}
	base := p.run.DeepCopy()
	base.Status = p.orig.Status
	if err := r.client.Status().Patch(ctx, p.run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	r.written.Set(client.ObjectKeyFromObject(p.run), p.run.ResourceVersion)
	return nil
}

// holdRun adds the run's own finalizer, at the version read, keeping the pass's edited status.
func (r *runReconciler) holdRun(ctx context.Context, run *v1alpha1.TeardownRun) error {
	held := run.DeepCopy()
	controllerutil.AddFinalizer(held, v1alpha1.FinalizerRun)
	if err := r.client.Patch(ctx, held, client.MergeFromWithOptions(run, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", v1alpha1.FinalizerRun, err)
	}
	run.Finalizers, run.ResourceVersion = held.Finalizers, held.ResourceVersion
	return nil
}

// trackWatches makes lookups' kinds watched while a run waits on them, and unwatched after.
func (r *runReconciler) trackWatches(req reconcile.Request, targets []steps.WatchTarget) {
	r.lookups.track(r.watches, req, "run:"+req.String(), targets)
}
