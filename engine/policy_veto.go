package engine

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
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

// readAdmission reads the admission policy and its binding, that enforce the verdicts of a policy
// that vetoes.
func (r *policyReconciler) readAdmission(ctx context.Context) []admissionRead {
	var reads []admissionRead
	for _, gvk := range []schema.GroupVersionKind{admissionPolicyGVK, admissionBindingGVK} {
		err := r.client.Get(ctx, client.ObjectKey{Name: v1alpha1.AdmissionPolicyName}, metaRef(gvk, "", ""))
		reads = append(reads, admissionRead{Kind: gvk.Kind, Err: err})
	}
	return reads
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
