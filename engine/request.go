package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// Two-phase delete (spec.trigger DeleteRequest): the policy's objects are armed with a veto (the
// verdict DenyAlways, which the admission policy enforces), a delete request starts the pipeline
// with the object alive, and the operator deletes the object once the pipeline succeeded. The
// policy's finalizer stays on the object all along: should the object be deleted some other way
// (no admission policy installed), the pipeline still runs before it goes, as with the trigger
// Finalizer.

// deleteRequest says who requests the deletion of obj: the delete-requested annotation (with
// the field manager that set it, when obj carries its managed fields), the object's own deletion,
// or its namespace's. "" means nobody does.
func (c clusterReads) deleteRequest(ctx context.Context, obj client.Object) string {
	if obj.GetDeletionTimestamp() != nil {
		return "the deletion of the object"
	}
	if v, ok := obj.GetAnnotations()[v1alpha1.AnnotationDeleteRequested]; ok {
		who := fmt.Sprintf("annotation %s=%q", v1alpha1.AnnotationDeleteRequested, v)
		if m := policy.ManagerOf(obj, "f:metadata", "f:annotations", "f:"+v1alpha1.AnnotationDeleteRequested); m != "" {
			who += ", set by field manager " + m
		}
		return who
	}
	if c.namespaceTerminating(ctx, obj.GetNamespace()) {
		return "the deletion of namespace " + obj.GetNamespace()
	}
	return ""
}

// armed reports whether a two-phase policy's veto is on obj: the policy protects it, nobody
// broke glass on it (the abandon annotation lifts the veto, so that a plain delete goes through),
// and its pipeline has not succeeded (the run that deletes it lifts the veto for its DELETE).
func armed(p *policy.Compiled, obj metav1.Object, want map[string]bool) bool {
	ann := obj.GetAnnotations()
	return p.TwoPhase() && p.InScope(obj.GetNamespace()) && want[p.Finalizer] && ann[v1alpha1.AnnotationAbandon] == "" &&
		ann[v1alpha1.AnnotationDeletedByRun] != naming.RunName(p.Key.Kind, p.Key.Namespace, p.Key.Name, obj.GetName(), obj.GetUID())
}

// armingMessage is what a refused plain delete of an armed object says.
func armingMessage(p policy.Key, key TargetKey, requested bool) string {
	if requested {
		return fmt.Sprintf("%s: deletion requested; the operator deletes the object once its teardown pipeline succeeded (kubectl teardown status %s)", p, objectArg(key))
	}
	return fmt.Sprintf("%s: this object is deleted after its teardown pipeline: request it with `kubectl teardown delete %s --reason <why>` or annotate it %s=\"<who>: <why>\"",
		p, objectArg(key), v1alpha1.AnnotationDeleteRequested)
}

// objectArg names an object as the plugin takes it: kind/name, with -n for a namespaced one.
func objectArg(key TargetKey) string {
	arg := resourceArg(key.GVK()) + "/" + key.Name
	if key.Namespace != "" {
		arg += " -n " + key.Namespace
	}
	return arg
}

// resourceArg names a kind as kubectl takes it: kind.group, lower case (configmap, bucket.s3.services.k8s.aws).
func resourceArg(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return strings.ToLower(gvk.Kind)
	}
	return strings.ToLower(gvk.Kind) + "." + gvk.Group
}

// requests starts the pipelines that the object's delete request asks for: one per two-phase
// policy whose finalizer it carries and whose deletion guard (if any) does not hold.
func (r *targetReconciler) requests(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, v verdict) error {
	if obj.Annotations[v1alpha1.AnnotationAbandon] != "" {
		return nil // break glass: the veto is lifted, a plain delete releases the object
	}
	requested := ""
	for _, p := range r.registry.ForGVK(key.GVK()) {
		// Finalizers name a policy within its namespace: a namespaced policy of the same name
		// elsewhere is not this object's.
		if !p.TwoPhase() || !p.InScope(key.Namespace) || p.Suspended || p.Deleting || !slices.Contains(obj.Finalizers, p.Finalizer) {
			continue
		}
		if requested == "" {
			if requested = r.reads.deleteRequest(ctx, obj); requested == "" {
				return nil
			}
		}
		if v.holding[p.Finalizer] {
			r.events.Emit(ctx, targetRef(key, obj), nil, key.Namespace, pipeline.Eventf(true, v1alpha1.ReasonDeleteRequestBlocked,
				"Delete request waits: the deletion guard of %s holds; the pipeline starts once it does not", p.Key))
			continue
		}
		runs := r.reads.runsOfTarget(ctx, obj.UID)
		if i := slices.IndexFunc(runs, func(run v1alpha1.TeardownRun) bool { return run.Spec.Finalizer == p.Finalizer }); i >= 0 {
			if runs[i].Status.Phase == v1alpha1.RunCancelled {
				r.wake.runs.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&runs[i])})
			}
			continue
		}
		if err := r.createRun(ctx, key, obj, p); err != nil {
			return err
		}
	}
	return nil
}

// recordedRun finds the run of this policy and target in the API server, in the target's
// namespace or the run namespace: a run recorded finished is not cached, and a two-phase
// request must not run the pipeline again because the cache misses it.
func (r *targetReconciler) recordedRun(ctx context.Context, namespace, name string) (client.ObjectKey, bool, error) {
	for _, ns := range slices.Compact([]string{namespace, r.runNamespace}) {
		if ns == "" {
			continue
		}
		key := client.ObjectKey{Namespace: ns, Name: name}
		err := r.reader.Get(ctx, key, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TeardownRun"}})
		switch {
		case err == nil:
			return key, true, nil
		case !apierrors.IsNotFound(err):
			return key, false, fmt.Errorf("looking for run %s: %w", key, err)
		}
	}
	return client.ObjectKey{}, false, nil
}

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
	gv, _ := schema.ParseGroupVersion(t.APIVersion)
	key := NewTargetKey(gv.WithKind(t.Kind), t.Namespace, t.Name)
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
	pk := policy.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}
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
	gv, _ := schema.ParseGroupVersion(t.APIVersion)
	if live, err := r.readTarget(ctx, NewTargetKey(gv.WithKind(t.Kind), t.Namespace, t.Name), t.UID, false); err != nil || live != nil {
		return reconcile.Result{}, err
	}
	if err := r.settle(ctx, run); err != nil {
		return reconcile.Result{RequeueAfter: conflictRetry}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{}, nil
}

// requestChanged reports whether a live object's delete request was made or withdrawn.
func requestChanged(ev watch.Event) bool {
	if ev.Old == nil {
		return false
	}
	_, had := ev.Old.Annotations[v1alpha1.AnnotationDeleteRequested]
	_, has := ev.Object.Annotations[v1alpha1.AnnotationDeleteRequested]
	return had != has
}
