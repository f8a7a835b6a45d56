package engine

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/admission"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

func TestNewAdmissionArming(t *testing.T) {
	withMAP := meta.NewDefaultRESTMapper(nil)
	withMAP.Add(admissionv1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicy"), meta.RESTScopeRoot)
	tests := []struct {
		name       string
		mapper     meta.RESTMapper
		disabled   bool
		wantServed bool
		wantReason string
	}{
		{"a cluster that serves MutatingAdmissionPolicy arms at creation", withMAP, false, true, ""},
		{"--admission-arming=false", withMAP, true, true, v1alpha1.ReasonAdmissionDisabled},
		{"a cluster that does not serve it", meta.NewDefaultRESTMapper(nil), false, false, v1alpha1.ReasonAdmissionUnavailable},
		{"a cluster that does not serve it, disabled too", meta.NewDefaultRESTMapper(nil), true, false, v1alpha1.ReasonAdmissionUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := newAdmissionArming(nil, nil, tt.mapper, nil, tt.disabled, ArmingBudget{})
			if err != nil {
				t.Fatal(err)
			}
			reason := ""
			if !a.active() {
				reason, _ = a.off()
			}
			if a.served != tt.wantServed || reason != tt.wantReason {
				t.Errorf("served %v, reason %q; want served %v, reason %q", a.served, reason, tt.wantServed, tt.wantReason)
			}
		})
	}
}

func TestAdmissionOffReports(t *testing.T) {
	a, _ := newAdmissionArming(nil, nil, meta.NewDefaultRESTMapper(nil), nil, false, ArmingBudget{})
	v := policy.View{Key: policy.Key{Kind: policy.KindNamespaced, Namespace: "shop", Name: "db"}}
	c, _, err := a.sync(context.Background(), v, nil, ready(v1alpha1.ReasonProtecting, ""), nil)
	if err != nil || c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonAdmissionUnavailable {
		t.Errorf("sync on a cluster without MutatingAdmissionPolicy: %+v, %v", c, err)
	}
	if c, _, _ := a.sync(context.Background(), v, nil, nil, nil); c != nil {
		t.Errorf("sync before the policy's readiness is known changed the condition: %+v", c)
	}
	if wait, err := a.removeBeforeRelease(context.Background(), v.Key, "uid"); wait != 0 || err != nil {
		t.Errorf("removeBeforeRelease with nothing served: %s, %v", wait, err)
	}
}

func TestPolicyOfAdmission(t *testing.T) {
	spec := func(ns string) admission.Spec {
		kind := policy.KindCluster
		if ns != "" {
			kind = policy.KindNamespaced
		}
		return admission.Spec{PolicyKind: kind, PolicyNamespace: ns, PolicyName: "db.v2", Finalizer: "f",
			Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaced: true}
	}
	namespaced, _ := admission.Build(spec("shop"))
	cluster, _ := admission.Build(spec(""))
	tests := []struct {
		name string
		kind string
		obj  *admissionv1.MutatingAdmissionPolicy
		want []reconcile.Request
	}{
		{"a TeardownPolicy's, to its controller", policy.KindNamespaced, namespaced, []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "shop", Name: "db.v2"}}}},
		{"a TeardownPolicy's, not to the other", policy.KindCluster, namespaced, nil},
		{"a ClusterTeardownPolicy's", policy.KindCluster, cluster, []reconcile.Request{{NamespacedName: types.NamespacedName{Name: "db.v2"}}}},
		{"someone else's", policy.KindCluster, &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := policyOfAdmission(tt.kind)(context.Background(), tt.obj)
			if len(got) != len(tt.want) || (len(got) == 1 && got[0] != tt.want[0]) {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}

func TestSameAdmission(t *testing.T) {
	s := admission.Spec{PolicyKind: policy.KindCluster, PolicyName: "db", PolicyUID: "u1", Finalizer: "f",
		Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaced: true}
	want, wantBinding := admission.Build(s)
	have, haveBinding := admission.Build(s)
	have.ResourceVersion, have.UID = "12", "server-uid" // set by the API server: no difference
	if !sameAdmission(have, want) || !sameAdmission(haveBinding, wantBinding) {
		t.Error("the same admission objects compare different")
	}
	s.Match = "has(object.data)"
	changed, _ := admission.Build(s)
	if sameAdmission(have, changed) {
		t.Error("a new match compares the same")
	}
	s.Match, s.PolicyUID = "", "u2"
	recreated, _ := admission.Build(s)
	if sameAdmission(have, recreated) {
		t.Error("a policy created again (another UID) compares the same")
	}
}
