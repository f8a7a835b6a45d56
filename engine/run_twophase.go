package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// The run side of a two-phase delete (see target_twophase.go): once the pipeline succeeded, the
// run deletes its object; a cancelled run waits for a new request or for its object to go.

// approvalRecheck is how soon a two-phase run that lifted its veto looks again whether the
// target reconciler has published the lifted verdict: it does so within milliseconds of the
// annotation's event.
const approvalRecheck = 250 * time.Millisecond

// deleteTarget deletes the object of a two-phase run whose pipeline succeeded, unless it is
// already going. It returns how soon to look again while the object is not deleted yet.
//
// The admission policy refuses a DELETE of an armed object whoever sends it, the operator
// included: no identity is exempt, so that every install works (another namespace, another
// ServiceAccount name, an operator run outside the cluster with an administrator's kubeconfig).
// So the run first lifts its own veto: it annotates the object with its name
// (AnnotationDeletedByRun), the target reconciler then publishes the verdict without this
// policy's DenyAlways, and only then is the DELETE sent. Other vetoes (another policy's deletion
// guard) still refuse it, with their message, until they do not hold. The annotation lifts
// nothing a user could not lift already with teardown.dev/abandon.
func (r *runReconciler) deleteTarget(ctx context.Context, run *v1alpha1.TeardownRun) (time.Duration, error) {
	t := run.Spec.Target
	key := targetKeyOf(t)
	if m, ok := r.watches.Get(key.GVK(), t.Namespace, t.Name); ok && m.UID == t.UID {
		if m.DeletionTimestamp != nil {
			return 0, nil
		}
		if wait, err := r.liftVeto(ctx, run, key, m); wait > 0 || err != nil {
			return wait, err
		}
	}
	// Background: the object goes first, its dependents after it, so nothing it owns races the end
	// of its pipeline either.
	// Unstructured, not metadata: the API server answers a DELETE that finalizers hold with the
	// whole object, which the metadata client cannot decode for a kind outside the scheme.
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(key.GVK())
	obj.SetNamespace(t.Namespace)
	obj.SetName(t.Name)
	err := r.client.Delete(ctx, obj, client.Preconditions{UID: &t.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err): // gone, or another object by now
		return 0, nil
	}
	if apierrors.IsForbidden(err) {
		// Refused, not failed: another policy's deletion guard holds, or RBAC says no. Looked at
		// again at a steady pace rather than with the error backoff, which would grow to minutes
		// after the guard stops holding.
		r.events.Emit(ctx, run, nil, run.Namespace, pipeline.Eventf(true, v1alpha1.ReasonDeleteFailed,
			"Cannot delete %s yet, although its pipeline succeeded: %v; trying again every %s (a deletion guard that holds, or the operator's RBAC: it needs delete on this kind)",
			targetName(t), err, deleteRefusedRecheck))
		ctrl.LoggerFrom(ctx).Info("deletion after a two-phase pipeline refused; trying again", "target", targetName(t), "error", err.Error())
		return deleteRefusedRecheck, nil
	}
	r.events.Emit(ctx, run, nil, run.Namespace, pipeline.Eventf(true, v1alpha1.ReasonDeleteFailed,
		"Cannot delete %s after its pipeline succeeded: %v", targetName(t), err))
	return 0, fmt.Errorf("deleting %s after its pipeline succeeded: %w", targetName(t), err)
}

// deleteRefusedRecheck is how often a two-phase run whose DELETE is refused (a deletion guard
// holds) tries again: a guard's verdict changes when a person acts, so seconds are soon enough.
const deleteRefusedRecheck = 10 * time.Second

// liftVeto lifts the run's policy's veto on its live object m before the operator's DELETE: it
// annotates m with the run's name, then waits until the target reconciler has published the
// verdict without the policy's arming. It returns how soon to look again; 0 once lifted.
func (r *runReconciler) liftVeto(ctx context.Context, run *v1alpha1.TeardownRun, key TargetKey, m *metav1.PartialObjectMetadata) (time.Duration, error) {
	ref := run.Spec.PolicyRef
	pk := policy.KeyOf(ref)
	if m.Annotations[v1alpha1.AnnotationDeletedByRun] != run.Name {
		// The UID in the patch makes it a precondition: a recreated object is not annotated.
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"uid": m.UID, "annotations": map[string]any{v1alpha1.AnnotationDeletedByRun: run.Name}}})
		if err != nil {
			return 0, err
		}
		if err := r.client.Patch(ctx, metaRef(key.GVK(), key.Namespace, key.Name), client.RawPatch(types.MergePatchType, body)); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				return 0, nil // gone, or another object by now: the DELETE's precondition tells
			}
			return 0, fmt.Errorf("lifting the veto on %s before deleting it: %w", key, err)
		}
		return approvalRecheck, nil
	}
	if strings.Contains(m.Annotations[v1alpha1.AnnotationDeletionGuardMessage], armingMessage(pk, key, true)) {
		return approvalRecheck, nil // the target reconciler has not published the lifted verdict yet
	}
	return 0, nil
}

// cancelled lets go of a cancelled run once its object is gone: it becomes a record, deleted
// after the retention period. While the object lives the run stays, to start over on a new
// request.
func (r *runReconciler) cancelled(ctx context.Context, run *v1alpha1.TeardownRun) (reconcile.Result, error) {
	t := run.Spec.Target
	if live, err := r.readTarget(ctx, targetKeyOf(t), t.UID, false); err != nil || live != nil {
		return reconcile.Result{}, err
	}
	if err := r.settle(ctx, run); err != nil {
		return reconcile.Result{RequeueAfter: conflictRetry}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{}, nil
}
