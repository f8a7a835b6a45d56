package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
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

// armed reports whether a two-phase policy's veto is on obj: the policy protects it and nobody
// broke glass on it (the abandon annotation lifts the veto, so that a plain delete goes through).
func armed(p *policy.Compiled, obj metav1.Object, want map[string]bool) bool {
	return p.TwoPhase() && p.InScope(obj.GetNamespace()) && want[p.Finalizer] && obj.GetAnnotations()[v1alpha1.AnnotationAbandon] == ""
}

// armingMessage is what a refused plain delete of an armed object says.
func armingMessage(p *policy.Compiled, key TargetKey, requested bool) string {
	if requested {
		return fmt.Sprintf("%s: deletion requested; the operator deletes the object once its teardown pipeline succeeded (kubectl teardown status)", p.Key)
	}
	return fmt.Sprintf("%s: this object is deleted after its teardown pipeline: request it with `kubectl teardown delete %s/%s --reason <why>` or annotate it %s=\"<who>: <why>\"",
		p.Key, resourceArg(key.GVK()), key.Name, v1alpha1.AnnotationDeleteRequested)
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
			r.events.emit(ctx, targetRef(key, obj), nil, key.Namespace, pipeline.Eventf(true, v1alpha1.ReasonDeleteRequestBlocked,
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

// deleteTarget deletes the object of a two-phase run whose pipeline succeeded, unless it is
// already going. The UID precondition makes sure it is the object the pipeline ran for. The
// operator's service account is exempt from the admission policy that refuses everyone else.
func (r *runReconciler) deleteTarget(ctx context.Context, run *v1alpha1.TeardownRun) error {
	t := run.Spec.Target
	gv, _ := schema.ParseGroupVersion(t.APIVersion)
	gvk := gv.WithKind(t.Kind)
	if m, ok := r.watches.Get(gvk, t.Namespace, t.Name); ok && m.UID == t.UID && m.DeletionTimestamp != nil {
		return nil
	}
	// Background: the object goes first, its dependents after it, so nothing it owns races the end
	// of its pipeline either.
	// Unstructured, not metadata: the API server answers a DELETE that finalizers hold with the
	// whole object, which the metadata client cannot decode for a kind outside the scheme.
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	obj.SetNamespace(t.Namespace)
	obj.SetName(t.Name)
	err := r.client.Delete(ctx, obj, client.Preconditions{UID: &t.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err): // gone, or another object by now
		return nil
	}
	r.events.emit(ctx, run, nil, run.Namespace, pipeline.Eventf(true, v1alpha1.ReasonDeleteFailed,
		"Cannot delete %s after its pipeline succeeded: %v. If an admission policy refused it, check that the operator's service account is exempt in ValidatingAdmissionPolicy teardown.dev-deletion-guard",
		targetName(t), err))
	return fmt.Errorf("deleting %s after its pipeline succeeded: %w", targetName(t), err)
}

// cancelled lets go of a cancelled run once its object is gone: it becomes a record, deleted
// after the retention period. While the object lives the run stays, to start over on a new
// request.
func (r *runReconciler) cancelled(ctx context.Context, run *v1alpha1.TeardownRun) (reconcile.Result, error) {
	t := run.Spec.Target
	gv, _ := schema.ParseGroupVersion(t.APIVersion)
	if live, err := r.readTarget(ctx, NewTargetKey(gv.WithKind(t.Kind), t.Namespace, t.Name), t.UID); err != nil || live != nil {
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
