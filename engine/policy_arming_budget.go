package engine

import (
	"context"
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/admission"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// ArmingBudget bounds the MutatingAdmissionPolicies the operator keeps: each one costs the API
// server memory (its compiled expressions) and time on every create it matches, so one tenant
// writing hundreds of policies must not make hundreds of them. A policy past the budget is still
// protecting; its objects are armed by the operator once it sees them, as on a cluster without
// admission policies. Zero is no bound.
type ArmingBudget struct {
	// Total bounds those of TeardownPolicies in all, PerNamespace those of one namespace.
	// ClusterTeardownPolicies, which only cluster administrators write, are not bounded, nor do
	// they count: tenants filling the budget must not leave the platform's own policies unarmed.
	Total, PerNamespace int
}

// DefaultArmingBudget is the operator's default (--max-arming-policies,
// --max-arming-policies-per-namespace).
var DefaultArmingBudget = ArmingBudget{Total: 200, PerNamespace: 20}

// budgetRetry is how often a policy past the budget looks again for room.
const budgetRetry = 30 * time.Second

// overBudget says why a policy may not have a new admission policy ("" when it may): the
// operator's admission policies already number the budget, in all or in the policy's namespace.
// Admission policies that exist are counted from the cache, so two policies made at once may
// both fit in the last place.
func (a *admissionArming) overBudget(ctx context.Context, spec admission.Spec) (string, error) {
	if spec.PolicyNamespace == "" || a.budget.Total <= 0 && a.budget.PerNamespace <= 0 {
		return "", nil
	}
	var list admissionv1.MutatingAdmissionPolicyList
	if err := a.client.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelManagedBy: admission.ManagedBy}); err != nil {
		return "", fmt.Errorf("counting the admission policies that arm objects: %w", err)
	}
	namespaced, inNamespace := 0, 0
	for _, p := range list.Items {
		if p.Labels[v1alpha1.LabelPolicyKind] != policy.KindNamespaced {
			continue
		}
		namespaced++
		if p.Labels[v1alpha1.LabelPolicyNamespace] == spec.PolicyNamespace {
			inNamespace++
		}
	}
	const armedLater = "; objects are armed by the operator once it sees them, and not while it is down (the policy still protects them): remove unused policies, or raise the flag"
	switch {
	case a.budget.PerNamespace > 0 && inNamespace >= a.budget.PerNamespace:
		return fmt.Sprintf("namespace %s already has %d TeardownPolicies armed at admission, as many as --max-arming-policies-per-namespace allows%s",
			spec.PolicyNamespace, inNamespace, armedLater), nil
	case a.budget.Total > 0 && namespaced >= a.budget.Total:
		return fmt.Sprintf("%d TeardownPolicies are already armed at admission, as many as --max-arming-policies allows%s", namespaced, armedLater), nil
	}
	return "", nil
}
