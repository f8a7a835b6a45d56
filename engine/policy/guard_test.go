package policy

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

func TestCompileGuard(t *testing.T) {
	children := v1alpha1.Lookup{Name: "children", APIVersion: "example.com/v1", Kind: "Cluster",
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"network": "${object.metadata.name}"}}}
	tests := []struct {
		name  string
		guard v1alpha1.DeletionGuard
		want  []string // each must appear in the error; none: compiles
	}{
		{"valid", v1alpha1.DeletionGuard{Deny: "size(children) > 0", Message: "${object.metadata.name} has ${size(children)} clusters",
			Lookups: []v1alpha1.Lookup{children}}, nil},
		{"deny reads an unknown lookup", v1alpha1.DeletionGuard{Deny: "size(kids) > 0", Message: "no"},
			[]string{"spec.deletionGuard.deny", "undeclared reference to 'kids'"}},
		{"deny is not a condition", v1alpha1.DeletionGuard{Deny: "1 + 1", Message: "no"},
			[]string{"spec.deletionGuard.deny", "must evaluate to bool"}},
		{"message reads an unknown lookup", v1alpha1.DeletionGuard{Deny: "true", Message: "${size(kids)} left"},
			[]string{"spec.deletionGuard.message", "kids"}},
		{"no message", v1alpha1.DeletionGuard{Deny: "true"},
			[]string{"spec.deletionGuard.message: Required value"}},
		{"deny reads steps", v1alpha1.DeletionGuard{Deny: "steps.a.phase == 'Succeeded'", Message: "no"},
			[]string{"spec.deletionGuard.deny", "steps"}},
		{"lookup in another namespace", v1alpha1.DeletionGuard{Deny: "size(x) > 0", Message: "no",
			Lookups: []v1alpha1.Lookup{{Name: "x", APIVersion: "v1", Kind: "Pod", Namespace: "kube-system"}}},
			[]string{`spec.deletionGuard.lookups[0].namespace: Forbidden`}},
		{"lookup with a reserved name", v1alpha1.DeletionGuard{Deny: "true", Message: "no",
			Lookups: []v1alpha1.Lookup{{Name: "object", APIVersion: "v1", Kind: "Pod"}}},
			[]string{"spec.deletionGuard.lookups[0].name"}},
	}
	c := compiler(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: validSpec()}
			g := tt.guard
			p.Spec.DeletionGuard = &g
			v, err := ViewOf(p)
			if err != nil {
				t.Fatal(err)
			}
			compiled, errs := c.Compile(v)
			if len(tt.want) == 0 {
				if len(errs) > 0 || compiled.Guard == nil || compiled.Guard.Deny == nil || len(compiled.Guard.Lookups) != 1 {
					t.Fatalf("want a compiled guard, got %v (errors %v)", compiled, errs)
				}
				return
			}
			msg := errs.ToAggregate()
			if msg == nil {
				t.Fatalf("compiled; want an error saying %v", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg.Error(), w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}
