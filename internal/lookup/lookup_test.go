package lookup

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
)

// scripted is a Lister over fixed answers: which kinds are namespaced, and what a List returns.
type scripted struct {
	namespaced bool
	items      []any
	err        error
	// asked records the last List's namespace and selector.
	asked struct {
		namespace string
		selector  string
	}
}

func (s *scripted) Namespaced(schema.GroupVersionKind) (bool, error) { return s.namespaced, nil }
func (s *scripted) List(_ context.Context, _ schema.GroupVersionKind, ns string, sel labels.Selector, _ int) ([]any, error) {
	s.asked.namespace, s.asked.selector = ns, sel.String()
	return s.items, s.err
}

func compileOneLookup(t *testing.T, cc Context, l v1alpha1.Lookup) Lookup {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	cc.Env = env
	ls, _, errs := Compile(cc, []v1alpha1.Lookup{l}, field.NewPath("lookups"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return ls[0]
}

func TestResolve(t *testing.T) {
	children := v1alpha1.Lookup{Name: "kids", APIVersion: "v1", Kind: "ConfigMap",
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"parent": "${object.metadata.name}"}}}
	object := map[string]any{"metadata": map[string]any{"name": "net-1", "namespace": "shop"}}
	vars := expr.Vars{expr.VarObject: object, expr.VarSteps: map[string]any{}, expr.VarRun: map[string]any{}}
	tests := []struct {
		name      string
		cc        Context
		lookup    v1alpha1.Lookup
		where     Where
		lister    *scripted
		wantNS    string
		wantSel   string
		wantErr   string
		refused   bool
		wantItems int
	}{
		{"in the target's namespace, selector rendered", Context{}, children, Where{TargetNamespace: "shop"},
			&scripted{namespaced: true, items: []any{map[string]any{}}}, "shop", "parent=net-1", "", false, 1},
		{"a TeardownPolicy reads only its namespace", Context{}, v1alpha1.Lookup{Name: "x", APIVersion: "v1", Kind: "ConfigMap", Namespace: "${'other'}"},
			Where{TargetNamespace: "shop", PolicyNamespace: "shop"}, &scripted{namespaced: true}, "", "", "may look only in its own namespace", true, 0},
		{"a TeardownPolicy reads no cluster-scoped kind", Context{}, v1alpha1.Lookup{Name: "x", APIVersion: "v1", Kind: "Node"},
			Where{TargetNamespace: "shop", PolicyNamespace: "shop"}, &scripted{namespaced: false}, "", "", "cluster-scoped", true, 0},
		{"too many", Context{}, children, Where{TargetNamespace: "shop"}, &scripted{namespaced: true, err: ErrTooMany},
			"", "", "more than 1000", true, 0},
		{"a failed read is not refused", Context{}, children, Where{TargetNamespace: "shop"}, &scripted{namespaced: true, err: errors.New("boom")},
			"", "", "boom", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := compileOneLookup(t, tt.cc, tt.lookup)
			items, target, err := l.Resolve(context.Background(), tt.lister, vars, tt.where)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errors.Is(err, ErrRefused) != tt.refused {
					t.Fatalf("err = %v, want one saying %q (refused: %v)", err, tt.wantErr, tt.refused)
				}
				return
			}
			if err != nil || len(items) != tt.wantItems || target.Namespace != tt.wantNS || tt.lister.asked.selector != tt.wantSel {
				t.Fatalf("got %d items in %q with selector %q, err %v", len(items), target.Namespace, tt.lister.asked.selector, err)
			}
		})
	}
}

func TestCompileNamesTheField(t *testing.T) {
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	_, _, errs := Compile(Context{Env: env, Namespaced: true, Namespace: "shop"}, []v1alpha1.Lookup{
		{Name: "a", APIVersion: "v1", Kind: "Pod", Namespace: "kube-system"},
		{Name: "a", APIVersion: "a/b/c", Kind: "Pod"},
		{Name: "b", APIVersion: "v1", Kind: "Pod", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k": "${object.nope("}}},
	}, field.NewPath("spec", "lookups"))
	msg := errs.ToAggregate().Error()
	for _, want := range []string{"spec.lookups[0].namespace: Forbidden", `spec.lookups[1].name: Duplicate value: "a"`,
		"spec.lookups[1].apiVersion", "spec.lookups[2].selector.matchLabels[k]"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors %q do not say %q", msg, want)
		}
	}
}
