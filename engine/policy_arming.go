package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/admission"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// admissionSettle is how long a policy being deleted waits, once its admission policy is gone,
// before it releases its targets (admission.Settle).
const admissionSettle = admission.Settle

// admissionArming keeps, for each Ready policy, the MutatingAdmissionPolicy and binding that add
// its finalizer to the objects it selects when they are created (package admission), and removes
// them when the policy stops being Ready, changes so that its match cannot run at admission, or
// goes. It reads them from the manager's cache, which holds the operator's own only.
type admissionArming struct {
	client client.Client
	reader client.Reader
	// served is whether the cluster serves MutatingAdmissionPolicy, and disabled whether the
	// operator runs with --admission-arming=false (then it only removes, once, at start, the
	// admission objects an earlier run made: sweepAdmission).
	served, disabled bool
	// gone are the policies being deleted whose admission objects the API server confirmed gone.
	gone sync.Map // types.UID -> struct{}
	// schemas holds back an admission policy on a kind whose schema the API server may not have
	// loaded yet.
	schemas *schemaGate
	// budget bounds how many admission policies the operator makes (policy_arming_budget.go).
	budget ArmingBudget
}

// sync brings the policy's admission objects in line with its compile (rd nil: not known yet, left
// as they are) and returns its ProtectedFromCreation condition (nil: unchanged), and when to look
// again (0: on the next change).
func (a *admissionArming) sync(ctx context.Context, v policy.View, compiled *policy.Compiled, rd *readiness, mapping *meta.RESTMapping) (*metav1.Condition, time.Duration, error) {
	switch {
	case rd == nil:
		return nil, 0, nil
	case !a.active():
		reason, message := a.off()
		return protectedFromCreation(false, reason, message), 0, nil
	case rd.status == metav1.ConditionTrue && (compiled == nil || mapping == nil):
		return nil, 0, nil // Ready, its kind's mapping not known yet: left as it is
	case rd.status != metav1.ConditionTrue:
		return protectedFromCreation(false, v1alpha1.ReasonNotProtecting, "the policy is not Ready: no object is armed"), 0, a.removeCached(ctx, v.Key)
	case compiled.MatchNotAdmissible != nil:
		return protectedFromCreation(false, v1alpha1.ReasonMatchNotAdmissible, fmt.Sprintf(
			"%v; objects are armed by the operator once it sees them, as on a cluster without admission policies", compiled.MatchNotAdmissible)), 0, a.removeCached(ctx, v.Key)
	}
	spec := admissionSpec(v, compiled, mapping)
	if !a.exists(ctx, spec.Name()) {
		// Only before it is made: one that exists is kept up to date whatever the budget and
		// the gate say.
		if why, err := a.overBudget(ctx, spec); err != nil || why != "" {
			return protectedFromCreation(false, v1alpha1.ReasonArmingBudget, why), budgetRetry, err
		}
		if wait, err := a.schemas.wait(compiled.GVK); err != nil || wait > 0 {
			return protectedFromCreation(false, v1alpha1.ReasonArmingPending, fmt.Sprintf(
				"waiting until the API server has had the schema of %s %s for %s before MutatingAdmissionPolicy %s matches it: until then the API server refuses every create such a policy matches; objects are armed by the operator meanwhile",
				compiled.GVK.Kind, compiled.GVK.GroupVersion(), schemaSettle, spec.Name())), max(wait, time.Second), err
		}
	}
	cond, err := a.apply(ctx, spec, compiled)
	return cond, 0, err
}

// exists reports whether the cache holds the admission policy of that name.
func (a *admissionArming) exists(ctx context.Context, name string) bool {
	return a.client.Get(ctx, client.ObjectKey{Name: name}, &admissionv1.MutatingAdmissionPolicy{}) == nil
}

// apply makes the policy's admission objects what spec says, and returns its condition.
func (a *admissionArming) apply(ctx context.Context, spec admission.Spec, compiled *policy.Compiled) (*metav1.Condition, error) {
	want, binding := admission.Build(spec)
	err := a.ensure(ctx, want, &admissionv1.MutatingAdmissionPolicy{})
	if err == nil {
		err = a.ensure(ctx, binding, &admissionv1.MutatingAdmissionPolicyBinding{})
	}
	if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
		// An admission policy that cannot be made what the policy says must not keep arming by
		// an older selector or match.
		return protectedFromCreation(false, v1alpha1.ReasonArmingRefused, fmt.Sprintf(
				"the API server refused MutatingAdmissionPolicy %s: %s; objects are armed by the operator once it sees them", spec.Name(), firstLine(err.Error()))),
			a.removeCached(ctx, policy.Key{Kind: spec.PolicyKind, Namespace: spec.PolicyNamespace, Name: spec.PolicyName})
	}
	if err != nil {
		return nil, err
	}
	return protectedFromCreation(true, v1alpha1.ReasonArmedAtAdmission, fmt.Sprintf(
		"MutatingAdmissionPolicy %s adds finalizer %s to the %s objects the policy selects when they are created, whether or not the operator runs",
		spec.Name(), compiled.Finalizer, compiled.GVK.Kind)), nil
}

// admissionSpec is what a policy arms at creation.
func admissionSpec(v policy.View, compiled *policy.Compiled, mapping *meta.RESTMapping) admission.Spec {
	return admission.Spec{PolicyKind: v.Key.Kind, PolicyNamespace: v.Key.Namespace, PolicyName: v.Key.Name, PolicyUID: v.Object.GetUID(),
		Finalizer: compiled.Finalizer, Resource: mapping.Resource, Namespaced: mapping.Scope.Name() == meta.RESTScopeNameNamespace,
		Selector: v.Spec.Selector, NamespaceSelector: v.NamespaceSelector, Match: v.Spec.Match}
}

// ensure creates want, or updates the cached object of its name (into) to it where they differ.
func (a *admissionArming) ensure(ctx context.Context, want, into client.Object) error {
	err := a.client.Get(ctx, client.ObjectKeyFromObject(want), into)
	switch {
	case apierrors.IsNotFound(err):
		err = a.client.Create(ctx, want)
		if !apierrors.IsAlreadyExists(err) {
			return wrapAdmission(err, "creating", want)
		}
		// Made meanwhile (the cache does not show it yet): read it from the API server and make
		// it the policy's.
		if err := a.reader.Get(ctx, client.ObjectKeyFromObject(want), into); err != nil {
			return fmt.Errorf("reading %s: %w", want.GetName(), err)
		}
	case err != nil:
		return fmt.Errorf("reading %s: %w", want.GetName(), err)
	}
	if sameAdmission(into, want) {
		return nil
	}
	want.SetResourceVersion(into.GetResourceVersion())
	return wrapAdmission(a.client.Update(ctx, want), "updating", want)
}

// sameAdmission reports whether the cached admission object has the spec, labels, annotation and
// owner the policy wants.
func sameAdmission(have, want client.Object) bool {
	if !equality.Semantic.DeepEqual(have.GetOwnerReferences(), want.GetOwnerReferences()) ||
		!equality.Semantic.DeepEqual(have.GetLabels(), want.GetLabels()) ||
		have.GetAnnotations()[v1alpha1.AnnotationPolicy] != want.GetAnnotations()[v1alpha1.AnnotationPolicy] {
		return false
	}
	switch h := have.(type) {
	case *admissionv1.MutatingAdmissionPolicy:
		return equality.Semantic.DeepEqual(h.Spec, want.(*admissionv1.MutatingAdmissionPolicy).Spec)
	case *admissionv1.MutatingAdmissionPolicyBinding:
		return equality.Semantic.DeepEqual(h.Spec, want.(*admissionv1.MutatingAdmissionPolicyBinding).Spec)
	}
	return false
}

// removeCached deletes the policy's admission objects that the cache shows: on every reconcile of
// a policy that is not Ready, with no request when there is nothing to delete.
func (a *admissionArming) removeCached(ctx context.Context, key policy.Key) error {
	if !a.active() {
		return nil
	}
	name := naming.ArmingPolicyName(key.Namespace, key.Name)
	for _, obj := range admission.Objects(name) {
		if err := a.client.Get(ctx, client.ObjectKey{Name: name}, obj); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("reading %s: %w", name, err)
		}
		if err := client.IgnoreNotFound(a.client.Delete(ctx, obj)); err != nil {
			return wrapAdmission(err, "deleting", obj)
		}
	}
	return nil
}

// removeBeforeRelease deletes the admission objects of a policy being deleted, asking the API
// server rather than the cache, and says how long to wait before releasing its targets: 0 once
// they are confirmed gone.
func (a *admissionArming) removeBeforeRelease(ctx context.Context, key policy.Key, uid types.UID) (time.Duration, error) {
	if !a.active() {
		return 0, nil
	}
	if _, ok := a.gone.Load(uid); ok {
		return 0, nil
	}
	deleted := false
	for _, obj := range admission.Objects(naming.ArmingPolicyName(key.Namespace, key.Name)) {
		err := a.client.Delete(ctx, obj)
		switch {
		case err == nil:
			deleted = true
		case !apierrors.IsNotFound(err):
			return 0, wrapAdmission(err, "deleting", obj)
		}
	}
	if deleted {
		return admissionSettle, nil
	}
	a.gone.Store(uid, struct{}{})
	return 0, nil
}

// forget drops what is remembered of a policy that is gone.
func (a *admissionArming) forget(uid types.UID) { a.gone.Delete(uid) }

func protectedFromCreation(ok bool, reason, message string) *metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return &metav1.Condition{Type: v1alpha1.ConditionProtectedFromCreation, Status: status, Reason: reason, Message: message}
}

func wrapAdmission(err error, verb string, obj client.Object) error {
	if err == nil {
		return nil
	}
	kind := "MutatingAdmissionPolicy"
	if _, ok := obj.(*admissionv1.MutatingAdmissionPolicyBinding); ok {
		kind = "MutatingAdmissionPolicyBinding"
	}
	return fmt.Errorf("%s %s %s: %w", verb, kind, obj.GetName(), err)
}
