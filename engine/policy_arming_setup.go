package engine

import (
	"context"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/admission"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// newAdmissionArming says whether the operator arms at admission: the cluster serves
// MutatingAdmissionPolicy (the manager's RESTMapper says so), and disabled is not set.
func newAdmissionArming(c client.Client, reader client.Reader, mapper meta.RESTMapper, schemas *schemaGate, disabled bool, budget ArmingBudget) (*admissionArming, error) {
	a := &admissionArming{client: c, reader: reader, schemas: schemas, disabled: disabled, budget: budget}
	gk := admissionv1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicy").GroupKind()
	_, err := mapper.RESTMapping(gk, admissionv1.SchemeGroupVersion.Version)
	switch {
	case err == nil:
		a.served = true
	case !meta.IsNoMatchError(err):
		return nil, fmt.Errorf("discovery of %s MutatingAdmissionPolicy: %w", admissionv1.SchemeGroupVersion, err)
	}
	return a, nil
}

// active reports whether the operator keeps admission policies.
func (a *admissionArming) active() bool { return a.served && !a.disabled }

// off is the reason and message of the ProtectedFromCreation condition while it does not.
func (a *admissionArming) off() (string, string) {
	if !a.served {
		return v1alpha1.ReasonAdmissionUnavailable, "the cluster does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes 1.36 or later does, unless it is disabled): objects are armed by the operator once it sees them, and not while it is down; restart the operator once the cluster serves it"
	}
	return v1alpha1.ReasonAdmissionDisabled, "the operator runs with --admission-arming=false: objects are armed by the operator once it sees them, and not while it is down"
}

// setup logs why the operator does not arm at admission, if it does not, and with
// --admission-arming=false on a cluster that serves admission policies, has the leader remove
// those an earlier run made (sweepAdmission).
func (a *admissionArming) setup(mgr manager.Manager) error {
	if a.active() {
		return nil
	}
	reason, message := a.off()
	ctrl.Log.WithName("engine").Info("not arming objects at creation", "reason", reason, "detail", message)
	if !a.served {
		return nil
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		a.sweepAdmission(ctx)
		return nil
	}))
}

// sweepAdmission deletes every admission object the operator made (by their label), read from the
// API server: with --admission-arming=false nothing keeps them, and they would arm new objects.
// It only logs what it could not do: the operator arms objects without them.
func (a *admissionArming) sweepAdmission(ctx context.Context) {
	log := ctrl.Log.WithName("engine")
	ours := client.MatchingLabels{v1alpha1.LabelManagedBy: admission.ManagedBy}
	removed := 0
	for _, list := range []client.ObjectList{&admissionv1.MutatingAdmissionPolicyBindingList{}, &admissionv1.MutatingAdmissionPolicyList{}} {
		if err := a.reader.List(ctx, list, ours); err != nil {
			log.Error(err, "cannot list the admission policies an earlier run made, to remove them")
			return
		}
		objs, _ := meta.ExtractList(list)
		for _, o := range objs {
			obj := o.(client.Object)
			if err := a.client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
				log.Error(err, "cannot remove an admission policy an earlier run made", "name", obj.GetName())
				continue
			}
			removed++
		}
	}
	if removed > 0 {
		log.Info("removed the admission policies and bindings an earlier run made to arm objects at creation (--admission-arming=false)", "count", removed)
	}
}

// policyOfAdmission maps an admission object of ours to the policy of kind kind it arms for, so
// that a change made by someone else is undone and one left by a policy that is gone removed.
func policyOfAdmission(kind string) func(context.Context, client.Object) []reconcile.Request {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		ref := o.GetAnnotations()[v1alpha1.AnnotationPolicy]
		parts := strings.Split(ref, "/")
		switch {
		case len(parts) == 2 && parts[0] == kind && kind == policy.KindCluster:
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: parts[1]}}}
		case len(parts) == 3 && parts[0] == kind && kind == policy.KindNamespaced:
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: parts[1], Name: parts[2]}}}
		}
		return nil
	}
}

// firstLine keeps an API error's first line for a condition's message.
func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
