package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/ownwrites"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
)

// Requeue periods of the policy reconciler.
const (
	// retryNotServed is how often a policy whose target kind is missing looks again, so that it
	// recovers by itself once the CRD is installed.
	retryNotServed = 10 * time.Second
	// retryDeleting is how often a policy being deleted checks whether its targets are released.
	retryDeleting = 2 * time.Second
	// waitSync is how soon a policy looks again while the watches have not started or its
	// target kind's watch has not synced: counts from a cache still filling would be wrong.
	waitSync = time.Second
)

type policyReconciler struct {
	kind     string
	client   client.Client
	reader   client.Reader
	registry *policy.Registry
	compiler *policy.Compiler
	watches  *watch.Manager
	// counter counts what the status reports and sets the policies' gauges.
	counter *policyCounter
	fin     *finalizerWriter
	reads   clusterReads
	wake    *wakeups
	served  servedKinds
	// statusWritten are the versions of this kind's policies as their last status write left
	// them.
	statusWritten *ownwrites.Versions[types.NamespacedName]
	// dryRuns asks the API server whether it accepts what a policy's steps create (policy_dryrun.go).
	dryRuns *dryRuns
	// arming keeps the admission policies that arm targets at creation (policy_arming.go).
	arming *admissionArming
}

func (r *policyReconciler) newObject() client.Object {
	if r.kind == policy.KindCluster {
		return &v1alpha1.ClusterTeardownPolicy{}
	}
	return &v1alpha1.TeardownPolicy{}
}

func (r *policyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := policy.Key{Kind: r.kind, Namespace: req.Namespace, Name: req.Name}
	cached := r.newObject()
	err := r.client.Get(ctx, req.NamespacedName, cached)
	if err == nil && r.statusWritten.Stale(req.NamespacedName, cached.GetResourceVersion()) {
		// The cache lacks this reconciler's last status write (policies ignore their own status
		// events): comparing against it could skip a write the API server needs.
		err = r.reader.Get(ctx, req.NamespacedName, cached)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(key)
			// Its admission objects, if any are left (the policy went while the operator was
			// down, or its finalizer was taken off by hand), would arm objects nobody releases.
			return reconcile.Result{}, r.arming.removeCached(ctx, key)
		}
		return reconcile.Result{}, err
	}
	// The compiled policy keeps pointers into the spec: it must never share the cache's copy.
	obj := cached.DeepCopyObject().(client.Object)
	v, err := policy.ViewOf(obj)
	if err != nil {
		return reconcile.Result{}, err
	}
	if obj.GetDeletionTimestamp() != nil {
		return r.reconcileDelete(ctx, v, cached)
	}
	if err := r.ensureFinalizer(ctx, obj); err != nil {
		return reconcile.Result{}, err
	}
	compiled, readiness, res := r.compile(ctx, v)
	if compiled != nil {
		prev := r.registry.Set(compiled)
		if prev == nil || prev.Generation != compiled.Generation || prev.Suspended != compiled.Suspended {
			r.wake.enqueueTargets(compiled.GVK, key.Namespace)
			if compiled.Suspended {
				r.enqueueRuns(ctx, key)
			}
		}
	}
	var mapping *meta.RESTMapping
	if compiled != nil {
		mapping, _ = r.watches.Mapping(compiled.GVK)
	}
	// An error keeping the admission objects is returned after the status is written: it must
	// not hold back what the compile found.
	arming, again, armErr := r.arming.sync(ctx, v, compiled, readiness, mapping)
	if again > 0 {
		res = earliest(res, reconcile.Result{RequeueAfter: again})
	}
	res, err = r.report(ctx, v, cached, policyFacts{Ready: readiness, Arming: arming}, res)
	if err == nil && armErr != nil {
		return reconcile.Result{}, armErr
	}
	return res, err
}

// compile compiles the policy and starts its watch, and says whether it is Ready; on failure it
// keeps what is known of the policy in the registry so its finalizers stay untouched.
func (r *policyReconciler) compile(ctx context.Context, v policy.View) (*policy.Compiled, *readiness, reconcile.Result) {
	gvk := targetGVK(v.Spec)
	compiled, errs := r.compiled(v)
	if len(errs) == 0 {
		errs = r.dryRuns.refusals(ctx, compiled)
	}
	if len(errs) > 0 {
		r.registry.SetInvalid(v.Key, gvk)
		r.acquireQuietly(gvk, v.Key)
		return nil, notReady(v1alpha1.ReasonInvalidSpec, errs.ToAggregate().Error()), reconcile.Result{}
	}
	mapping, err := r.watches.Acquire(gvk, consumerOf(v.Key))
	if errors.Is(err, watch.ErrNotStarted) {
		return nil, nil, reconcile.Result{RequeueAfter: waitSync}
	}
	if err != nil {
		r.registry.SetInvalid(v.Key, gvk)
		return nil, notReady(v1alpha1.ReasonKindNotServed, fmt.Sprintf(
				"spec.targetRef: %s %s is not served by the cluster (is its CRD installed?); checking again every %s", gvk.Kind, gvk.GroupVersion(), retryNotServed)),
			reconcile.Result{RequeueAfter: retryNotServed}
	}
	if since, gone := r.served.gone(gvk); gone {
		// Its CRD was removed: no object of it is left to protect, and the cached mapping and
		// watch would otherwise keep the policy Ready.
		r.registry.SetInvalid(v.Key, gvk)
		return nil, notReady(v1alpha1.ReasonKindNotServed, fmt.Sprintf(
			"spec.targetRef: %s %s is no longer served by the cluster (since %s: its CRD was removed?); checking again every %s",
			gvk.Kind, gvk.GroupVersion(), since.UTC().Format(time.RFC3339), retryNotServed)), reconcile.Result{RequeueAfter: retryNotServed}
	}
	if v.Key.Namespaced() && mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		r.watches.Release(gvk, consumerOf(v.Key))
		r.registry.SetInvalid(v.Key, gvk)
		return nil, notReady(v1alpha1.ReasonInvalidTarget, "spec.targetRef: "+policy.ClusterScopedTarget(gvk.Kind)), reconcile.Result{}
	}
	if compiled.Suspended {
		return compiled, notReady(v1alpha1.ReasonSuspended, "spec.suspend is true: targets are released and runs abandoned"), reconcile.Result{}
	}
	return compiled, ready(v1alpha1.ReasonProtecting, fmt.Sprintf("protecting %s objects; finalizer %s", gvk.Kind, compiled.Finalizer)), reconcile.Result{}
}

// compiled returns the policy compiled, reusing the registry's copy of this generation: most
// reconciles of a policy only recount its objects and runs.
func (r *policyReconciler) compiled(v policy.View) (*policy.Compiled, field.ErrorList) {
	if prev := r.registry.Get(v.Key); prev != nil && prev.UID == v.Object.GetUID() && prev.Generation == v.Object.GetGeneration() && !prev.Deleting {
		return prev, nil
	}
	return r.compiler.Compile(v)
}

func (r *policyReconciler) acquireQuietly(gvk schema.GroupVersionKind, key policy.Key) {
	if !gvk.Empty() {
		_, _ = r.watches.Acquire(gvk, consumerOf(key))
	}
}

// reconcileDelete releases the policy's targets and lets the policy go once none carries its
// finalizer. Targets already being deleted keep it until their runs finish. In a namespace being
// deleted, every target is about to be deleted too, so none is released early: the policy waits
// for all of their pipelines.
func (r *policyReconciler) reconcileDelete(ctx context.Context, v policy.View, cached client.Object) (reconcile.Result, error) {
	if !slices.Contains(v.Object.GetFinalizers(), v1alpha1.FinalizerPolicy) {
		return reconcile.Result{}, nil
	}
	// The admission policy goes first: an object it armed after the release below would keep a
	// finalizer that nobody removes.
	if wait, err := r.arming.removeBeforeRelease(ctx, v.Key, v.Object.GetUID()); err != nil || wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, err
	}
	gvk := targetGVK(v.Spec)
	compiled, errs := r.compiler.Compile(v)
	if len(errs) > 0 {
		// An invalid policy has no pipeline: it only lets go of its targets.
		compiled = &policy.Compiled{Key: v.Key, UID: v.Object.GetUID(), Finalizer: v.Key.Finalizer(), GVK: gvk,
			Selector: labels.Nothing(), Deleting: true, Spec: v.Spec}
	}
	prev := r.registry.Set(compiled)
	if prev == nil || !prev.Deleting {
		r.wake.enqueueTargets(gvk, v.Key.Namespace)
	}
	remaining, active := 0, 0
	_, gone := r.served.gone(gvk) // no object of a kind no longer served carries the finalizer
	if _, err := r.watches.Mapping(gvk); err == nil && !gone {
		r.acquireQuietly(gvk, v.Key)
		if !r.watches.Synced(gvk) {
			return reconcile.Result{RequeueAfter: waitSync}, nil
		}
		remaining = r.counter.protected(gvk, v.Key, compiled.Finalizer)
	}
	counts, err := r.counter.runs(ctx, v.Key)
	if err != nil {
		return reconcile.Result{}, err
	}
	active = counts.active
	if remaining > 0 || active > 0 {
		msg := fmt.Sprintf("policy is being deleted: waiting for %d objects to lose finalizer %s and %d runs to finish", remaining, compiled.Finalizer, active)
		if v.Key.Namespaced() && r.reads.namespaceTerminating(ctx, v.Key.Namespace) {
			msg = fmt.Sprintf("namespace is being deleted: waiting for the teardown of %d objects (%d runs in flight)", remaining, active)
		}
		f := policyFacts{Ready: notReady(v1alpha1.ReasonReleasing, msg), Protected: &remaining, Runs: &runCounts{active: active, stuck: int(v.Status.StuckRuns)},
			Arming: protectedFromCreation(false, v1alpha1.ReasonNotProtecting, "the policy is being deleted: no object is armed at creation")}
		if _, err := r.report(ctx, v, cached, f, reconcile.Result{}); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{RequeueAfter: retryDeleting}, nil
	}
	// The cache said none is left; confirm with the API server before letting go. A finalizer patch
	// computed before the deletion may still land after the cache count, and once this policy is
	// gone nothing would watch that kind to remove it.
	if _, err := r.watches.Mapping(gvk); err == nil && !gone {
		n, err := r.counter.protectedLive(ctx, gvk, v.Key.Namespace, compiled.Finalizer)
		if err != nil {
			return reconcile.Result{}, err
		}
		if n > 0 {
			r.wake.enqueueTargets(gvk, v.Key.Namespace)
			return reconcile.Result{RequeueAfter: retryDeleting}, nil
		}
	}
	return r.letGo(ctx, v)
}

// letGo removes the policy's own finalizer, once nothing holds it, and forgets the policy.
func (r *policyReconciler) letGo(ctx context.Context, v policy.View) (reconcile.Result, error) {
	kept := slices.DeleteFunc(slices.Clone(v.Object.GetFinalizers()), func(f string) bool { return f == v1alpha1.FinalizerPolicy })
	if _, err := r.writePolicyFinalizers(ctx, v.Object, kept); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.forget(v.Key)
	r.arming.forget(v.Object.GetUID())
	return reconcile.Result{}, nil
}

// forget drops a policy that is gone.
func (r *policyReconciler) forget(key policy.Key) {
	r.statusWritten.Forget(types.NamespacedName{Namespace: key.Namespace, Name: key.Name})
	if prev := r.registry.Delete(key); prev != nil {
		r.wake.enqueueTargets(prev.GVK, key.Namespace)
		r.watches.Release(prev.GVK, consumerOf(key))
	}
	r.counter.forget(key)
}

func (r *policyReconciler) ensureFinalizer(ctx context.Context, obj client.Object) error {
	if slices.Contains(obj.GetFinalizers(), v1alpha1.FinalizerPolicy) {
		return nil
	}
	rv, err := r.writePolicyFinalizers(ctx, obj, append(slices.Clone(obj.GetFinalizers()), v1alpha1.FinalizerPolicy))
	if err != nil {
		return fmt.Errorf("adding finalizer %s: %w", v1alpha1.FinalizerPolicy, err)
	}
	obj.SetFinalizers(append(obj.GetFinalizers(), v1alpha1.FinalizerPolicy))
	obj.SetResourceVersion(rv) // so that this reconcile's status update is not a conflict
	return nil
}

// writePolicyFinalizers sets the policy's own finalizers, locked to the version obj was read at.
func (r *policyReconciler) writePolicyFinalizers(ctx context.Context, obj client.Object, finalizers []string) (string, error) {
	gvk := v1alpha1.GroupVersion.WithKind(r.kind)
	m := metaRef(gvk, obj.GetNamespace(), obj.GetName())
	m.SetResourceVersion(obj.GetResourceVersion())
	return r.fin.write(ctx, gvk, m, finalizers)
}

// report completes the facts of a policy's status (what it protects, its runs and match errors,
// the admission policy), computes the status (policyStatus), sets the gauges from it, and writes
// it if it changed. A policy being deleted brings its own counts.
func (r *policyReconciler) report(ctx context.Context, v policy.View, cached client.Object, f policyFacts, res reconcile.Result) (reconcile.Result, error) {
	f.Generation, f.Finalizer = v.Object.GetGeneration(), v.Key.Finalizer()
	if f.Vetoes = vetoes(v.Spec); f.Vetoes {
		f.Admission = r.readAdmission(ctx)
	}
	deleting := v.Object.GetDeletionTimestamp() != nil
	if !deleting {
		var err error
		if res, err = r.count(ctx, v, &f, res); err != nil {
			return reconcile.Result{}, err
		}
	}
	// Teardowns end while a policy is being deleted too: its namespace's, notably.
	history, wait := r.counter.history.take(v.Key, v.Object.GetUID())
	if wait > 0 {
		res = earliest(res, reconcile.Result{RequeueAfter: wait})
	}
	f.History = history
	origView, _ := policy.ViewOf(cached)
	st := policyStatus(*origView.Status, f)
	r.counter.gauges(v.Key, st, deleting)
	if equality.Semantic.DeepEqual(*origView.Status, st) {
		return res, nil
	}
	*v.Status = st
	written, err := r.writeStatus(ctx, v.Object)
	switch {
	case err != nil:
		return reconcile.Result{}, err
	case !written:
		return reconcile.Result{RequeueAfter: conflictRetry}, nil // gone meanwhile: look again
	}
	r.counter.history.written(v.Key, f.History)
	return res, nil
}

// count adds to f what the policy protects (once its target kind's watch has synced), its runs
// and its match errors, and requeues for the moment a run crosses the stuck threshold.
func (r *policyReconciler) count(ctx context.Context, v policy.View, f *policyFacts, res reconcile.Result) (reconcile.Result, error) {
	gvk := targetGVK(v.Spec)
	if r.watches.Watching(gvk) && r.watches.Synced(gvk) {
		compiled := r.registry.Get(v.Key)
		n, unarmed := r.counter.targets(ctx, gvk, v.Key, v.Key.Finalizer(), compiled)
		f.Protected = &n
		if compiled != nil {
			r.counter.setUnarmed(v.Key, unarmed)
		}
	} else if r.watches.Watching(gvk) {
		res = earliest(res, reconcile.Result{RequeueAfter: waitSync})
	}
	counts, err := r.counter.runs(ctx, v.Key)
	if err != nil {
		return res, err
	}
	matchErrors := r.counter.matchErrs.count(v.Key)
	f.Runs, f.MatchErrors = &counts, &matchErrors
	if counts.nextStuck > 0 {
		// A run crosses the stuck threshold with nothing else happening: count it then.
		res = earliest(res, reconcile.Result{RequeueAfter: counts.nextStuck})
	}
	return res, nil
}

// writeStatus writes a policy's status and reports whether it did (false: the policy is gone).
// A full update rather than a merge patch: a patch computed against the cached status omits
// counts that stay 0, and `kubectl get` would show them blank instead of 0. It updates a copy:
// the client decodes the reply into the object it sends, reusing its maps, and the compiled
// policy in the registry shares obj's spec with target workers.
func (r *policyReconciler) writeStatus(ctx context.Context, obj client.Object) (bool, error) {
	written := obj.DeepCopyObject().(client.Object)
	if err := r.client.Status().Update(ctx, written); err != nil {
		r.statusWritten.Set(client.ObjectKeyFromObject(written), ownwrites.Unknown)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("writing status: %w", err)
	}
	r.statusWritten.Set(client.ObjectKeyFromObject(written), written.GetResourceVersion())
	return true, nil
}

// enqueueRuns queues the policy's unfinished runs (suspend abandons them).
func (r *policyReconciler) enqueueRuns(ctx context.Context, key policy.Key) {
	runs, _ := r.reads.runsOfPolicy(ctx, key)
	for i := range runs {
		if !runs[i].Status.Phase.Finished() || slices.Contains(runs[i].Finalizers, v1alpha1.FinalizerRun) {
			r.wake.runs.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&runs[i])})
		}
	}
}

func consumerOf(key policy.Key) string { return "policy:" + key.String() }

func targetGVK(spec *v1alpha1.TeardownPolicySpec) schema.GroupVersionKind {
	gv, err := schema.ParseGroupVersion(spec.TargetRef.APIVersion)
	if err != nil {
		return schema.GroupVersionKind{}
	}
	return gv.WithKind(spec.TargetRef.Kind)
}
