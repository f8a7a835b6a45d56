package engine

import (
	"fmt"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// FieldManager is the field manager of the engine's writes. It names the writer for server-side
// apply and managedFields only: any client may pick any field manager name, so the operator
// never takes one for an identity.
const FieldManager = "teardown-operator"

// trusted checks that a run's spec is one the engine could have written: its finalizer is its
// policy's, it lives in its target's namespace or the run namespace, and a TeardownPolicy's run
// targets that policy's namespace. Its status needs no check: only the operator may write the
// status subresource (a status sent with a create or an update of the run is dropped by the API
// server). The engine acts with
// its own rights on the target a run names, so a hand-made or hand-edited run must not be able to
// remove any finalizer from any object.
func trusted(runNamespace string, run *v1alpha1.TeardownRun) error {
	ref, t := run.Spec.PolicyRef, run.Spec.Target
	switch {
	case run.Spec.Finalizer != naming.Finalizer(ref.Kind, ref.Name):
		return fmt.Errorf("spec.finalizer %q is not the finalizer of %s %s", run.Spec.Finalizer, ref.Kind, ref.Name)
	case run.Namespace != t.Namespace && run.Namespace != runNamespace:
		return fmt.Errorf("a run lives in its target's namespace or in %s, not %s", runNamespace, run.Namespace)
	case ref.Kind == policy.KindNamespaced && t.Namespace != ref.Namespace:
		return fmt.Errorf("a TeardownPolicy's run can only target its own namespace %q", ref.Namespace)
	case ref.Kind == policy.KindCluster && ref.Namespace != "":
		return fmt.Errorf("spec.policyRef.namespace must be empty for a ClusterTeardownPolicy")
	}
	return nil
}
