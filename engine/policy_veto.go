package engine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// The kinds of the admission policy that enforces vetoes, read as metadata only.
var (
	admissionPolicyGVK  = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"}
	admissionBindingGVK = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"}
)

// vetoes reports whether a policy publishes verdicts that the admission policy enforces.
func vetoes(spec *v1alpha1.TeardownPolicySpec) bool {
	return spec.DeletionGuard != nil || spec.Trigger == v1alpha1.TriggerDeleteRequest
}

// setVetoEnforced records on a policy that vetoes whether the admission policy and its binding
// are installed: without them its verdicts are published and nothing refuses a DELETE.
func (r *policyReconciler) setVetoEnforced(ctx context.Context, v policy.View) {
	conds := &v.Status.Conditions
	if !vetoes(v.Spec) {
		meta.RemoveStatusCondition(conds, v1alpha1.ConditionVetoEnforced)
		return
	}
	status, reason := metav1.ConditionTrue, v1alpha1.ReasonAdmissionInstalled
	msg := fmt.Sprintf("ValidatingAdmissionPolicy %s and its binding are installed: a DELETE of a vetoed object is refused", v1alpha1.AdmissionPolicyName)
	for _, gvk := range []schema.GroupVersionKind{admissionPolicyGVK, admissionBindingGVK} {
		err := r.client.Get(ctx, client.ObjectKey{Name: v1alpha1.AdmissionPolicyName}, metaRef(gvk, "", ""))
		switch {
		case apierrors.IsNotFound(err):
			status, reason = metav1.ConditionFalse, v1alpha1.ReasonAdmissionMissing
			msg = fmt.Sprintf("%s %s is not installed: verdicts are published on objects and nothing refuses their deletion; install config/admission (the Helm chart does)", gvk.Kind, v1alpha1.AdmissionPolicyName)
		case err != nil:
			status, reason = metav1.ConditionUnknown, v1alpha1.ReasonAdmissionUnverified
			msg = fmt.Sprintf("cannot read %s %s: %v", gvk.Kind, v1alpha1.AdmissionPolicyName, err)
		default:
			continue
		}
		break
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: v1alpha1.ConditionVetoEnforced, Status: status, Reason: reason,
		Message: msg, ObservedGeneration: v.Object.GetGeneration()})
}

// policiesThatVeto maps a change to the admission policy to the policies of kind that veto.
func (e *Engine) policiesThatVeto(kind string) func(context.Context, client.Object) []reconcile.Request {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		if o.GetName() != v1alpha1.AdmissionPolicyName {
			return nil
		}
		var out []reconcile.Request
		for _, gvk := range e.registry.GVKs() {
			for _, p := range e.registry.ForGVK(gvk) {
				if p.Key.Kind == kind && p.Spec != nil && vetoes(p.Spec) {
					out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: p.Key.Namespace, Name: p.Key.Name}})
				}
			}
		}
		return out
	}
}
