package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/ownwrites"
	"github.com/teardown-dev/teardown-operator/steps"
)

// cleanUp lets go of a finished run: it removes the finalizer from the target (if the outcome
// releases it), then its own finalizer, and deletes the run after the retention period. The run's
// own finalizer marks a release still to do, so a crash anywhere here is completed next time; a
// run recorded finished has none (see completeRelease).
func (r *runReconciler) cleanUp(ctx context.Context, run *v1alpha1.TeardownRun) (reconcile.Result, error) {
	ownedErr := r.releaseOwned(ctx, run)
	if trusted(r.runNamespace, run) != nil {
		// A rejected run released nothing and holds nothing: only the record is left to expire.
		return r.expire(ctx, run)
	}
	switch {
	case run.Status.Phase == v1alpha1.RunCancelled && ownedErr == nil:
		return r.cancelled(ctx, run)
	case ownedErr != nil && !run.Status.Phase.Releases(run.Spec.Pipeline.FailurePolicy):
		return reconcile.Result{RequeueAfter: ownedRetry}, nil
	case !run.Status.Phase.Releases(run.Spec.Pipeline.FailurePolicy):
		return reconcile.Result{}, nil
	case !slices.Contains(run.Finalizers, v1alpha1.FinalizerRun):
		return r.completeRelease(ctx, run, ownedErr)
	}
	if wait, err := r.releaseTarget(ctx, run); wait > 0 || err != nil {
		return reconcile.Result{RequeueAfter: wait}, err
	}
	if ownedErr != nil {
		// The target is released; the run keeps its own finalizer, the mark of work still to
		// do, until what its steps made is let go.
		return reconcile.Result{RequeueAfter: ownedRetry}, nil
	}
	if err := r.settle(ctx, run); err != nil {
		if apierrors.IsInvalid(err) { // the patch's test failed: the list moved; read it again
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{}, nil
}

// settle makes a finished run that released its target a record: its own finalizer goes and it
// is labelled v1alpha1.LabelReleased, in one patch. The label takes it out of the cache (see
// CacheOptions); the retention sweeper deletes it in time.
func (r *runReconciler) settle(ctx context.Context, run *v1alpha1.TeardownRun) error {
	ops := []map[string]any{{"op": "test", "path": "/metadata/uid", "value": run.UID}}
	if i := slices.Index(run.Finalizers, v1alpha1.FinalizerRun); i >= 0 {
		ops = append(ops,
			map[string]any{"op": "test", "path": fmt.Sprintf("/metadata/finalizers/%d", i), "value": v1alpha1.FinalizerRun},
			map[string]any{"op": "remove", "path": fmt.Sprintf("/metadata/finalizers/%d", i)})
	}
	if run.Labels == nil {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{v1alpha1.LabelReleased: "true"}})
	} else {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/labels/" + jsonPointerEscape(v1alpha1.LabelReleased), "value": "true"})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	// Remembered until the cache lets the run go (forgetRun): until then it may still serve an
	// older version of it, whose steps are not all done. Marked unknown first: the cache can let
	// it go before the patch's response comes, and the response must not bring it back.
	key := client.ObjectKeyFromObject(run)
	r.written.Set(key, ownwrites.Unknown)
	settled := run.DeepCopy()
	if err := r.client.Patch(ctx, settled, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return fmt.Errorf("settling run %s/%s: %w", run.Namespace, run.Name, err)
	}
	r.written.Update(key, settled.ResourceVersion)
	return nil
}

// completeRelease handles a finished run that releases its target and holds no finalizer of its
// own: one recorded failed before runs that keep their object held one (earlier versions), then
// abandoned. A run recorded finished that releases is labelled released at once and never cached
// (see runReconciler.start).
func (r *runReconciler) completeRelease(ctx context.Context, run *v1alpha1.TeardownRun, ownedErr error) (reconcile.Result, error) {
	if r.holdsTarget(run) {
		if wait, err := r.releaseTarget(ctx, run); wait > 0 || err != nil {
			return reconcile.Result{RequeueAfter: wait}, err
		}
	}
	if ownedErr != nil {
		return reconcile.Result{RequeueAfter: ownedRetry}, nil
	}
	return reconcile.Result{}, client.IgnoreNotFound(r.settle(ctx, run))
}

// releaseTarget removes the run's finalizer from its target. A two-phase run that ended well
// (or failed under failurePolicy Release) deletes the target first; one abandoned does not. It
// returns how soon to look again while that deletion waits.
func (r *runReconciler) releaseTarget(ctx context.Context, run *v1alpha1.TeardownRun) (time.Duration, error) {
	if run.Spec.Trigger == v1alpha1.TriggerDeleteRequest && run.Status.Phase != v1alpha1.RunAbandoned {
		if wait, err := r.deleteTarget(ctx, run); wait > 0 || err != nil {
			return wait, err
		}
	}
	t := run.Spec.Target
	key := targetKeyOf(t)
	if _, err := r.fin.remove(ctx, key.GVK(), t.Namespace, t.Name, t.UID, run.Spec.Finalizer); err != nil && !meta.IsNoMatchError(err) {
		return 0, fmt.Errorf("releasing %s %s/%s: %w", t.Kind, t.Namespace, t.Name, err)
	}
	// A released run leaves the run cache at once; the target cache may show the finalizer a
	// moment longer.
	r.released.Add(key, t.UID, run.Spec.Finalizer)
	return 0, nil
}

// holdsTarget reports whether the run's target may still carry its finalizer: the watch cache
// says so, or the kind is not watched (its policy is gone) and only the API server can tell.
func (r *runReconciler) holdsTarget(run *v1alpha1.TeardownRun) bool {
	t := run.Spec.Target
	gvk := t.GroupVersionKind()
	if !r.watches.Synced(gvk) {
		return true
	}
	m, ok := r.watches.Get(gvk, t.Namespace, t.Name)
	return ok && m.UID == t.UID && slices.Contains(m.Finalizers, run.Spec.Finalizer)
}

// expire lets go of a rejected run: its own finalizer, if a hand-made run carries it, then the
// run itself after the retention period.
func (r *runReconciler) expire(ctx context.Context, run *v1alpha1.TeardownRun) (reconcile.Result, error) {
	if slices.Contains(run.Finalizers, v1alpha1.FinalizerRun) {
		m := &metav1.PartialObjectMetadata{ObjectMeta: run.ObjectMeta}
		m.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("TeardownRun"))
		if _, err := r.fin.patchOut(ctx, m.GroupVersionKind(), m, v1alpha1.FinalizerRun); err != nil {
			if apierrors.IsInvalid(err) { // the patch's test failed: the list moved; read it again
				return reconcile.Result{RequeueAfter: conflictRetry}, nil
			}
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return r.retain(ctx, run)
}

// retain deletes a finished run once the retention period has passed since it completed.
func (r *runReconciler) retain(ctx context.Context, run *v1alpha1.TeardownRun) (reconcile.Result, error) {
	if r.retention <= 0 || run.Status.CompletionTime == nil || run.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	if left := time.Until(run.Status.CompletionTime.Add(r.retention)); left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	return reconcile.Result{}, client.IgnoreNotFound(r.client.Delete(ctx, run))
}

// ownedRetry is how soon a finished run tries again to let go of what its steps made.
const ownedRetry = 10 * time.Second

// releaseOwned lets every kind that makes objects for runs let go of this finished run's.
func (r *runReconciler) releaseOwned(ctx context.Context, run *v1alpha1.TeardownRun) error {
	if trusted(r.runNamespace, run) != nil {
		return nil
	}
	var errs []error
	for _, k := range r.kinds {
		if o, ok := k.(steps.Owner); ok {
			if err := o.ReleaseRun(ctx, run); err != nil {
				errs = append(errs, fmt.Errorf("%s steps: %w", k.Name(), err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "cannot yet let go of what the run's steps made; trying again", "retryIn", ownedRetry)
		return err
	}
	return nil
}

// jsonPointerEscape escapes a map key for a JSON pointer (RFC 6901).
func jsonPointerEscape(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}
