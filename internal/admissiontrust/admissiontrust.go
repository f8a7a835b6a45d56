// Package admissiontrust tells since when one of the operator's ValidatingAdmissionPolicies is in
// force: installed with its binding, failing closed and denying. What such a policy checks (who
// approved, who asked for a deletion) is trusted only for what was written after that moment, and
// nothing while the policy or its binding is missing, does not fail closed, or does not deny.
// Its rules must be the shipped manifest's (config/admission): an edited policy, or a binding that
// narrows it, is trusted no more than a missing one.
package admissiontrust

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// Checks is what the policy checks, after "that checks": "approvers".
	Checks string
	// Noun is what it vouches for: "approval".
	Noun string
}

// Installed is one of the operator's admission policies as the API server has it.
type Installed struct {
	Policy  admissionregistrationv1.ValidatingAdmissionPolicy
	Binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// MissingError says that an admission policy or its binding is not installed.
type MissingError struct{ Kind, Name string }

func (e *MissingError) Error() string { return e.Kind + " " + e.Name + " is not installed" }

// Read reads the admission policy name and its binding (same name); a *MissingError when one is
// not installed.
func Read(ctx context.Context, reader client.Reader, name string) (Installed, error) {
	var in Installed
	for _, o := range []struct {
		kind string
		obj  client.Object
	}{{"ValidatingAdmissionPolicy", &in.Policy}, {"ValidatingAdmissionPolicyBinding", &in.Binding}} {
		switch err := reader.Get(ctx, client.ObjectKey{Name: name}, o.obj); {
		case apierrors.IsNotFound(err):
			return in, &MissingError{Kind: o.kind, Name: name}
		case err != nil:
			return in, fmt.Errorf("reading the %s %s: %w", o.kind, name, err)
		}
	}
	return in, nil
}

// NotEnforced says why an installed admission policy does not refuse what it should: it does not
// fail closed, its binding does not deny, or it is not the policy shipped with the operator.
func (in Installed) NotEnforced() (string, error) {
	name := in.Policy.Name
	if fp := in.Policy.Spec.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
		return fmt.Sprintf("the ValidatingAdmissionPolicy %s has no failurePolicy Fail, so what it could not check would be let through", name), nil
	}
	if in.Binding.Spec.PolicyName != name || !slices.Contains(in.Binding.Spec.ValidationActions, admissionregistrationv1.Deny) {
		return fmt.Sprintf("the ValidatingAdmissionPolicyBinding %s does not deny with policy %s, so it refuses nothing", name, name), nil
	}
	changed, err := edited(name, &in.Policy, &in.Binding)
	if err != nil || changed == "" {
		return "", err
	}
	return fmt.Sprintf("the ValidatingAdmissionPolicy %s is not the one shipped with the operator (%s changed), so what it checks is not what the operator relies on; install config/admission (or the chart) again",
		name, changed), nil
}

// Since is when what the policy checks came to be trusted: Settle after the policy and its binding
// were created or, for one whose spec has changed since (its generation is past 1), after its last
// write, since an edit undone is no proof of what was admitted while it lasted. Writes that change
// only labels or annotations (a helm upgrade's) do not move it; the API server's own writes of the
// policy's status do not count.
func (in Installed) Since() time.Time {
	var since time.Time
	for _, o := range []metav1.Object{&in.Policy, &in.Binding} {
		if t := o.GetCreationTimestamp().Time; t.After(since) {
			since = t
		}
		if o.GetGeneration() <= 1 {
			continue
		}
		// When the spec changed is not kept: the last write of any field stands for it.
		for _, m := range o.GetManagedFields() {
			if m.Subresource == "" && m.Time != nil && m.Time.After(since) {
				since = m.Time.Time
			}
		}
	}
	return since.Add(Settle)
}

// Since reads the policy and its binding from the API server (reader) and returns since when
// what it checks is trusted, or an error that says why nothing is.
func Since(ctx context.Context, reader client.Reader, p Policy) (time.Time, error) {
	in, err := Read(ctx, reader, p.Name)
	var missing *MissingError
	switch {
	case errors.As(err, &missing):
		return time.Time{}, fmt.Errorf("the %s %s that checks %s is not installed, so no %s can be trusted (install the operator's config/admission, or the chart, again)",
			missing.Kind, p.Name, p.Checks, p.Noun)
	case err != nil:
		return time.Time{}, err
	}
	why, err := in.NotEnforced()
	switch {
	case err != nil:
		return time.Time{}, err
	case why != "":
		return time.Time{}, fmt.Errorf("%s: no %s is trusted", why, p.Noun)
	}
	return in.Since(), nil
}
