package engine

import (
	"fmt"
	"strings"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// FieldManager is the field manager of the engine's writes. A run's status written by any other
// manager is not trusted (TeardownRun has no status subresource: see trusted).
const FieldManager = "teardown-operator"

// trusted checks that a run's spec is one the engine could have written: its finalizer is its
// policy's, it lives in its target's namespace or the run namespace, and a TeardownPolicy's run
// targets that policy's namespace; and that only the engine wrote its status. The engine acts with
// its own rights on the target a run names, so a hand-made or hand-edited run must not be able to
// remove any finalizer from any object.
func trusted(runNamespace string, run *v1alpha1.TeardownRun) error {
	ref, t := run.Spec.PolicyRef, run.Spec.Target
	if m := foreignStatusWriter(run); m != "" {
		return fmt.Errorf("its status was written by field manager %q: only the operator writes a run's status", m)
	}
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

// foreignStatusWriter returns a field manager other than the engine's that owns a field of the
// run's status, or "".
func foreignStatusWriter(run *v1alpha1.TeardownRun) string {
	for _, mf := range run.ManagedFields {
		if mf.Manager != FieldManager && mf.FieldsV1 != nil && strings.Contains(mf.FieldsV1.GetRawString(), `"f:status"`) {
			return mf.Manager
		}
	}
	return ""
}
