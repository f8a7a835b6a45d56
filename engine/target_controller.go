package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/eventsink"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// targetReconciler keeps one object's teardown finalizers in line with the policies that select
// it, and starts the runs of an object being deleted.
type targetReconciler struct {
	// reader reads a whole object from the API server (a CEL match, a run's snapshot).
	reader   client.Reader
	registry *policy.Registry
	// watches is the cache of the targets' metadata.
	watches *watch.Manager
	events  *eventsink.Sink
	// reads are the cached reads of namespaces, policies and delete requests.
	reads   clusterReads
	arming  armer
	guard   *deletionGuards
	matches matchReports
	// runs is the run side: it starts the runs of deletions and answers for them.
	runs runSide
}

// retryUnknownPolicy is how soon a finalizer of a policy the engine has not loaded yet is looked at
// again (only at start-up, while policies are being compiled).
const retryUnknownPolicy = 2 * time.Second

// recheckRecorded is how soon a deleted target whose run this engine has just recorded, and the
// cache does not show yet, is looked at again.
const recheckRecorded = 2 * time.Second

func (r *targetReconciler) Reconcile(ctx context.Context, key TargetKey) (reconcile.Result, error) {
	obj, ok := r.watches.Get(key.GVK(), key.Namespace, key.Name)
	if !ok {
		return reconcile.Result{}, nil // gone
	}
	if obj.DeletionTimestamp != nil {
		return r.reconcileDeleting(ctx, key, obj)
	}
	return r.reconcileLive(ctx, key, obj)
}

// reconcileLive adds the finalizers of the policies that select the object and removes those of
// policies that no longer do.
func (r *targetReconciler) reconcileLive(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata) (reconcile.Result, error) {
	look := &lazyObject{r: r, key: key}
	want, managed, err := r.desiredFinalizers(ctx, key, obj, look)
	if err != nil {
		return reconcile.Result{}, err
	}
	v, watch, err := r.guards(ctx, key, obj, look, want)
	if errors.Is(err, errGone) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	r.guard.track(key, watch)
	if err := r.guard.publish(ctx, key, obj, v); err != nil {
		return reconcile.Result{}, err
	}
	var next []string
	changed := false
	for _, f := range obj.Finalizers {
		drop := naming.IsOurs(f) && !want[f] && (managed[f] || r.orphaned(ctx, f, key.Namespace))
		if drop {
			changed = true
			continue
		}
		next = append(next, f)
	}
	var added []string
	for f, wanted := range want {
		if wanted && !slices.Contains(obj.Finalizers, f) {
			added = append(added, f)
		}
	}
	sort.Strings(added)
	if len(added) > 0 {
		next = append(next, added...)
		changed = true
	}
	if !changed {
		return reconcile.Result{}, r.requests(ctx, key, obj, v)
	}
	if err := r.arming.arm(ctx, key, obj, next, r.finalizersOnly(key)); err != nil {
		return reconcile.Result{}, err
	}
	r.arming.armedLate(r.registry, key.Namespace, added)
	return reconcile.Result{}, nil
}

// desiredFinalizers returns the finalizers the object should carry (want) and those whose presence
// the engine decides (managed); finalizers of policies that are invalid, still loading, or whose
// CEL match failed to evaluate are left as they are.
func (r *targetReconciler) desiredFinalizers(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, look *lazyObject) (want, managed map[string]bool, err error) {
	want, managed = map[string]bool{}, map[string]bool{}
	policies := r.registry.ForGVK(key.GVK())
	failed := make(map[policy.Key]error, len(policies))
	defer func() {
		if err == nil {
			r.recordMatchErrors(ctx, key, obj, policies, failed)
			r.matches.recordRejects(key, policies, look.rejected)
		}
	}()
	for _, p := range policies {
		if !p.InScope(key.Namespace) {
			continue
		}
		if p.Deleting && p.Key.Namespaced() && r.reads.namespaceTerminating(ctx, p.Key.Namespace) {
			// The whole namespace goes: its objects are about to be deleted and need the pipeline.
			want[p.Finalizer] = slices.Contains(obj.Finalizers, p.Finalizer)
			managed[p.Finalizer] = true
			continue
		}
		managed[p.Finalizer] = true
		if p.Suspended || p.Deleting {
			continue
		}
		selected, err := look.selectedBy(ctx, p, obj)
		switch {
		case errors.Is(err, errGone):
			return map[string]bool{}, map[string]bool{}, nil
		case errors.As(err, new(*matchError)):
			failed[p.Key] = err
			managed[p.Finalizer] = false
		case err != nil:
			return nil, nil, err
		case selected:
			want[p.Finalizer] = true
		}
	}
	return want, managed, nil
}

// orphaned reports whether a teardown finalizer belongs to no existing policy. A policy that
// exists but is not compiled yet (start-up) keeps its finalizers.
func (r *targetReconciler) orphaned(ctx context.Context, finalizer, ns string) bool {
	if _, known := r.registry.ForFinalizer(finalizer, ns); known {
		return false
	}
	return !r.reads.policyOfFinalizerExists(ctx, finalizer, ns)
}

// reconcileDeleting starts a run for each teardown finalizer on an object being deleted, or
// releases the finalizer when there is nothing to run.
func (r *targetReconciler) reconcileDeleting(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata) (reconcile.Result, error) {
	runs := r.runs.runsOf(ctx, obj.UID)
	var result reconcile.Result
	for _, f := range obj.Finalizers {
		if !naming.IsOurs(f) || r.runs.releasedHere(key, obj.UID, f) {
			continue
		}
		if run := runWith(runs, f); run != nil {
			r.runs.wake(run)
			continue
		}
		res, err := r.startRun(ctx, key, obj, f)
		if err != nil {
			return reconcile.Result{}, err
		}
		result = earliest(result, res)
	}
	return result, nil
}

func (r *targetReconciler) startRun(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, finalizer string) (reconcile.Result, error) {
	pkey, known := r.registry.ForFinalizer(finalizer, key.Namespace)
	if !known {
		if !r.orphaned(ctx, finalizer, key.Namespace) {
			return reconcile.Result{RequeueAfter: retryUnknownPolicy}, nil
		}
		return reconcile.Result{}, r.releaseWithoutRun(ctx, key, obj, finalizer, pipeline.Eventf(false, v1alpha1.ReasonPolicyGone,
			"Policy for finalizer %s no longer exists; nothing to run, finalizer removed", finalizer))
	}
	p := r.registry.Get(pkey)
	switch {
	case p == nil && obj.Annotations[v1alpha1.AnnotationAbandon] != "" && r.abandonTrusted(ctx, key, obj):
		return reconcile.Result{}, r.releaseWithoutRun(ctx, key, obj, finalizer, pipeline.Eventf(true, v1alpha1.ReasonAbandoned,
			"%s is invalid and %s is set (%q): finalizer removed without a run", pkey, v1alpha1.AnnotationAbandon, obj.Annotations[v1alpha1.AnnotationAbandon]))
	case p == nil:
		r.events.Emit(ctx, targetRef(key, obj), nil, key.Namespace, pipeline.Eventf(true, v1alpha1.ReasonPolicyInvalid,
			"%s is invalid, so the teardown cannot start; fix the policy, or set annotation %s to release the object", pkey, v1alpha1.AnnotationAbandon))
		return reconcile.Result{RequeueAfter: time.Minute}, nil
	case p.Pipeline == nil:
		return reconcile.Result{}, r.releaseWithoutRun(ctx, key, obj, finalizer, pipeline.Eventf(true, v1alpha1.ReasonPolicyGone,
			"%s is being deleted and is invalid: nothing to run, finalizer removed", pkey))
	case p.Suspended:
		return reconcile.Result{}, r.releaseWithoutRun(ctx, key, obj, finalizer, pipeline.Eventf(false, v1alpha1.ReasonAbandoned,
			"%s is suspended: finalizer removed without a run", pkey))
	}
	if r.runs.recordedHere(p, key, obj.UID) {
		// Its run goes on, passed by the run controller; looked at again once the cache has it.
		return reconcile.Result{RequeueAfter: recheckRecorded}, nil
	}
	return reconcile.Result{}, r.createRun(ctx, key, obj, p)
}

func (r *targetReconciler) releaseWithoutRun(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, finalizer string, ev pipeline.Event) error {
	if err := r.arming.release(ctx, key, obj.UID, finalizer); err != nil {
		return err
	}
	r.events.Emit(ctx, targetRef(key, obj), nil, key.Namespace, ev)
	return nil
}

// abandonTrusted reports whether the abandon annotation on a deleted object whose policy is
// invalid (so no run reads it) is a request the admission policy that checks requests admitted;
// when not, an event says why. The object is read from the API server: the cache has no managed
// fields, which say when it was set.
func (r *targetReconciler) abandonTrusted(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata) bool {
	live := metaRef(key.GVK(), key.Namespace, key.Name)
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, live); err != nil || live.UID != obj.UID {
		return false
	}
	req, ok := r.reads.readRequest(ctx, live, v1alpha1.AnnotationAbandon)
	if ok && req.untrusted != "" {
		r.events.Emit(ctx, targetRef(key, obj), nil, key.Namespace, requestIgnored("Break glass", req.untrusted))
	}
	return ok && req.untrusted == ""
}

// createRun starts the TeardownRun for this deletion (see runReconciler.start). Its name is derived
// from the policy and the target's UID, so a repeat finds the run already there. Where it goes and
// what its first pass starts from is planStart's decision.
func (r *targetReconciler) createRun(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, p *policy.Compiled) error {
	plan := r.runs.plan(ctx, p, key, obj)
	if plan.FromCache {
		return r.createRunFromCache(ctx, key, obj, p, plan)
	}
	full, err := readObject(ctx, r.reader, key)
	if err != nil || full == nil {
		return err
	}
	// Decide on the live object, not the caches: the run cache can already miss a run that
	// finished and was deleted (say with its namespace) while the target cache still shows the
	// finalizer that run has since removed. Creating a run then would start a second teardown.
	live := &unstructured.Unstructured{Object: full}
	if !carries(live, obj.UID, p.Finalizer) {
		return nil
	}
	var requested string
	if p.TwoPhase() {
		var untrusted string
		if requested, untrusted = r.reads.deleteRequest(ctx, live, true); requested == "" {
			if untrusted != "" {
				r.events.Emit(ctx, targetRef(key, obj), nil, key.Namespace, requestIgnored("Delete request", untrusted))
			}
			return nil // withdrawn meanwhile, or not one admission checked
		}
	} else if live.GetDeletionTimestamp() == nil {
		return nil
	}
	if p.TwoPhase() || plan.Resume {
		// The run cache may miss a run recorded finished, and one a predecessor recorded (it may
		// serve the past): neither must start the pipeline again.
		name := naming.RunName(p.Key.Kind, p.Key.Namespace, p.Key.Name, key.Name, obj.UID)
		if found, err := r.runs.resumeRecorded(ctx, key.Namespace, name); err != nil || found {
			return err
		}
	}
	snapshot, err := policy.Snapshot(full)
	if err != nil {
		return err
	}
	run := p.NewRun(key.GVK(), live, snapshot)
	run.Namespace = plan.Namespace
	target := metaRef(key.GVK(), key.Namespace, key.Name)
	md, _ := live.Object["metadata"].(map[string]any)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(md, &target.ObjectMeta); err != nil {
		return fmt.Errorf("reading the metadata of %s: %w", key, err)
	}
	return r.runs.start(ctx, runStart{run: run, policy: p, key: key, target: target, requested: requested, plan: plan})
}

// createRunFromCache starts the run of a policy that keeps a run only when its pipeline does not
// succeed at once, and whose pipeline reads no more of the object than metadata fields the cache
// keeps: the cache's metadata is all its first pass needs. The object is read from the API
// server (for the run's snapshot, and to make sure the cache was not behind) only if the run is
// to be recorded; an object this engine has just released is known from ownwrites.Releases, not
// from a read.
func (r *targetReconciler) createRunFromCache(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, p *policy.Compiled, plan startPlan) error {
	if obj.DeletionTimestamp == nil || !slices.Contains(obj.Finalizers, p.Finalizer) {
		return nil
	}
	target := obj.DeepCopy()
	target.SetGroupVersionKind(key.GVK())
	run := p.NewRun(key.GVK(), target, nil)
	run.Namespace = plan.Namespace
	if p.Pipeline.ReadsObject {
		// Its expressions read only metadata fields the cache keeps: `object` is the cached
		// metadata until the run, if recorded, gets the whole object.
		raw, err := json.Marshal(target)
		if err != nil {
			return fmt.Errorf("encoding the metadata of %s: %w", key, err)
		}
		run.Spec.Object.Raw = raw
	}
	return r.runs.start(ctx, runStart{run: run, policy: p, key: key, target: target, plan: plan})
}

// carries reports whether the live object is the one of that UID and still holds finalizer.
func carries(live *unstructured.Unstructured, uid types.UID, finalizer string) bool {
	return live.GetUID() == uid && slices.Contains(live.GetFinalizers(), finalizer)
}

// targetRef is an object events can be recorded on.
func targetRef(key TargetKey, obj metav1.Object) runtime.Object {
	m := metaRef(key.GVK(), key.Namespace, key.Name)
	m.SetUID(obj.GetUID())
	m.SetResourceVersion(obj.GetResourceVersion())
	return m
}

// objectRef refers to the target obj of key, as the events library would; nil when obj is.
func objectRef(key TargetKey, obj *metav1.PartialObjectMetadata) *corev1.ObjectReference {
	if obj == nil {
		return nil
	}
	return &corev1.ObjectReference{APIVersion: key.GVK().GroupVersion().String(), Kind: key.GVK().Kind,
		Namespace: key.Namespace, Name: key.Name, UID: obj.UID, ResourceVersion: obj.ResourceVersion}
}

// earliest combines two results, keeping the sooner requeue.
func earliest(a, b reconcile.Result) reconcile.Result {
	if a.RequeueAfter == 0 || (b.RequeueAfter > 0 && b.RequeueAfter < a.RequeueAfter) {
		a.RequeueAfter = b.RequeueAfter
	}
	return a
}
