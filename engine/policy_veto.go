package engine

import (
	"context"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/admissiontrust"
)

// vetoes reports whether a policy publishes verdicts that the admission policy enforces.
func vetoes(spec *v1alpha1.TeardownPolicySpec) bool {
	return spec.DeletionGuard != nil || spec.Trigger == v1alpha1.TriggerDeleteRequest
}

// readAdmission reads the admission policies and their bindings that enforce the verdicts of a
// policy that vetoes (vetoAdmission), from the manager's cache: a policy reconciles often, and a
// change to them reconciles it again.
func (r *policyReconciler) readAdmission(ctx context.Context) []admissionRead {
	var reads []admissionRead
	for _, name := range vetoAdmission {
		in, err := admissiontrust.Read(ctx, r.client, name)
		read := admissionRead{Name: name, Err: err}
		if err == nil {
			read.NotEnforced, read.Err = in.NotEnforced()
		}
		reads = append(reads, read)
	}
	return reads
}

// policiesThatVeto maps a change to one of the admission policies that enforce vetoes to the
// policies of kind that veto.
func (e *Engine) policiesThatVeto(kind string) func(context.Context, client.Object) []reconcile.Request {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		if !slices.Contains(vetoAdmission, o.GetName()) {
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
