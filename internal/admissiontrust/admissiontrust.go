// Package admissiontrust tells since when one of the operator's ValidatingAdmissionPolicies is in
// force: installed with its binding, failing closed and denying. What such a policy checks (who
// approved, who asked for a deletion) is trusted only for what was written after that moment, and
// nothing while the policy or its binding is missing, does not fail closed, or does not deny.
// What its rules check is the shipped manifest's: an edited rule is not detected.
package admissiontrust

import (
	"context"
	"fmt"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Settle is how long after an admission policy or its binding is created what it checks is
// trusted: an API server enforces an admission policy once its informer has it, within a second
// or so; anything written sooner may have gone unchecked.
const Settle = 5 * time.Second

// Policy names one admission policy (its binding has the same name) and what it vouches for, as
// the messages say it.
type Policy struct {
	Name string
	// Checks is what the policy checks, after "that checks": "approvers"; Checker is one of them
	// ("approver").
	Checks, Checker string
	// Noun is what it vouches for ("approval"), and One the same with its article ("an approval").
	Noun, One string
}

// Since reads the policy and its binding from the API server (reader) and returns since when
// what it checks is trusted, or an error that says why nothing is.
func Since(ctx context.Context, reader client.Reader, p Policy) (time.Time, error) {
	key := client.ObjectKey{Name: p.Name}
	var pol admissionregistrationv1.ValidatingAdmissionPolicy
	var bind admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, o := range []struct {
		kind string
		obj  client.Object
	}{{"ValidatingAdmissionPolicy", &pol}, {"ValidatingAdmissionPolicyBinding", &bind}} {
		switch err := reader.Get(ctx, key, o.obj); {
		case apierrors.IsNotFound(err):
			return time.Time{}, fmt.Errorf("the %s %s that checks %s is not installed, so no %s can be trusted (install the operator's config/admission, or the chart, again)",
				o.kind, p.Name, p.Checks, p.Noun)
		case err != nil:
			return time.Time{}, fmt.Errorf("reading the %s %s that checks %s: %w", o.kind, p.Name, p.Checks, err)
		}
	}
	if fp := pol.Spec.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
		return time.Time{}, fmt.Errorf("the ValidatingAdmissionPolicy %s has no failurePolicy Fail, so %s it could not check would be let through: none is trusted", p.Name, p.One)
	}
	if bind.Spec.PolicyName != p.Name || !slices.Contains(bind.Spec.ValidationActions, admissionregistrationv1.Deny) {
		return time.Time{}, fmt.Errorf("the ValidatingAdmissionPolicyBinding %s does not deny with policy %s, so nothing refuses a false %s: no %s is trusted",
			p.Name, p.Name, p.Checker, p.Noun)
	}
	since := pol.CreationTimestamp.Time
	if bind.CreationTimestamp.After(since) {
		since = bind.CreationTimestamp.Time
	}
	return since.Add(Settle), nil
}
