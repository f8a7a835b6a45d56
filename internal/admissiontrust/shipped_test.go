package admissiontrust

import (
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// asInstalled is a shipped policy as the API server stores it: defaulted.
func asInstalled(t *testing.T, name string) Installed {
	t.Helper()
	all, err := shippedByName()
	if err != nil {
		t.Fatal(err)
	}
	s, ok := all[name]
	if !ok {
		t.Fatalf("policy %s is not shipped", name)
	}
	in := Installed{Policy: *s.policy.DeepCopy(), Binding: *s.binding.DeepCopy()}
	in.Policy.Spec.MatchConstraints = defaulted(in.Policy.Spec.MatchConstraints)
	return in
}

func TestEveryTrustedPolicyIsShipped(t *testing.T) {
	for _, name := range []string{v1alpha1.AdmissionPolicyName, v1alpha1.MarksPolicyName, v1alpha1.ApprovalPolicyName, v1alpha1.RequestsPolicyName} {
		in := asInstalled(t, name)
		if why, err := in.NotEnforced(); err != nil || why != "" {
			t.Errorf("%s as shipped: %q, %v; want it enforced", name, why, err)
		}
	}
}

func TestNotEnforced(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(in *Installed)
		want string
	}{
		{"labelled by the chart", func(in *Installed) { in.Policy.Labels = map[string]string{"helm.sh/chart": "x"} }, ""},
		{"a validation made always true", func(in *Installed) { in.Policy.Spec.Validations[0].Expression = "true" }, "(spec.validations changed)"},
		{"a match condition that matches nothing", func(in *Installed) {
			in.Policy.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "never", Expression: "false"}}
		}, "(spec.matchConditions changed)"},
		{"UPDATE no longer matched", func(in *Installed) {
			in.Policy.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
		}, "(spec.matchConstraints changed)"},
		{"a binding narrowed to one namespace", func(in *Installed) {
			in.Binding.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}}
		}, "(the binding's spec.matchResources changed)"},
		{"a binding that only warns", func(in *Installed) {
			in.Binding.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}
		}, "does not deny"},
		{"failing open", func(in *Installed) { in.Policy.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore) }, "has no failurePolicy Fail"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := asInstalled(t, v1alpha1.MarksPolicyName)
			tc.edit(&in)
			why, err := in.NotEnforced()
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" && why != "" || !strings.Contains(why, tc.want) {
				t.Errorf("NotEnforced = %q, want it to say %q", why, tc.want)
			}
		})
	}
}

func TestSinceCountsTheLastWrite(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	edited := created.Add(time.Hour)
	status := created.Add(2 * time.Hour)
	in := asInstalled(t, v1alpha1.MarksPolicyName)
	in.Policy.CreationTimestamp = metav1.NewTime(created)
	in.Binding.CreationTimestamp = metav1.NewTime(created)
	if got := in.Since(); !got.Equal(created.Add(Settle)) {
		t.Errorf("never written since created: Since %s, want %s", got, created.Add(Settle))
	}
	in.Policy.Generation, in.Binding.Generation = 1, 1
	in.Binding.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "helm", Operation: metav1.ManagedFieldsOperationUpdate, Time: ptr.To(metav1.NewTime(edited))}}
	if got := in.Since(); !got.Equal(created.Add(Settle)) {
		t.Errorf("labels changed (helm upgrade), spec never: Since %s, want %s", got, created.Add(Settle))
	}
	in.Binding.Generation = 3
	in.Policy.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-apiserver", Subresource: "status", Time: ptr.To(metav1.NewTime(status))}}
	if got := in.Since(); !got.Equal(edited.Add(Settle)) {
		t.Errorf("binding's spec edited (and status written later): Since %s, want %s", got, edited.Add(Settle))
	}
}
