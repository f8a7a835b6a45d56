package policy

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
	"github.com/teardown-dev/teardown-operator/steps/wait"
)

// noLister satisfies wait.Lister; compilation never calls it.
type noLister struct{ wait.Lister }

func compiler(t *testing.T) *Compiler {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	return NewCompiler(env, steps.Registry{wait.New(noLister{})}, nil)
}

func zero() *metav1.Duration { return &metav1.Duration{} }

func validSpec() v1alpha1.TeardownPolicySpec {
	return v1alpha1.TeardownPolicySpec{
		TargetRef: v1alpha1.TargetReference{APIVersion: "example.com/v1", Kind: "Database"},
		Pipeline:  v1alpha1.Pipeline{Steps: []v1alpha1.Step{{Name: "a", Wait: &v1alpha1.WaitStep{Duration: zero()}}}},
	}
}

func TestCompileErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1alpha1.TeardownPolicySpec)
		want   []string // each must appear in the aggregated error
	}{
		{"bad apiVersion", func(s *v1alpha1.TeardownPolicySpec) { s.TargetRef.APIVersion = "a/b/c" },
			[]string{"spec.targetRef.apiVersion"}},
		{"own group", func(s *v1alpha1.TeardownPolicySpec) { s.TargetRef.APIVersion = "teardown.dev/v1alpha1" },
			[]string{"spec.targetRef.apiVersion: Forbidden: teardown.dev resources cannot be targets"}},
		{"bad selector", func(s *v1alpha1.TeardownPolicySpec) {
			s.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}
		}, []string{"spec.selector"}},
		{"match syntax", func(s *v1alpha1.TeardownPolicySpec) { s.Match = "object.spec ==" },
			[]string{"spec.match", "Syntax error"}},
		{"match not bool", func(s *v1alpha1.TeardownPolicySpec) { s.Match = "1 + 1" },
			[]string{"spec.match", "must evaluate to bool"}},
		{"when undeclared", func(s *v1alpha1.TeardownPolicySpec) { s.Steps[0].When = "target.ready" },
			[]string{"spec.steps[0].when", "undeclared reference to 'target'"}},
		{"duplicate step", func(s *v1alpha1.TeardownPolicySpec) { s.Steps = append(s.Steps, s.Steps[0]) },
			[]string{`spec.steps[1].name: Duplicate value: "a"`}},
		{"no kind", func(s *v1alpha1.TeardownPolicySpec) { s.Steps[0].Wait = nil },
			[]string{"spec.steps[0]", "sets no step kind; set exactly one of wait"}},
		{"until error", func(s *v1alpha1.TeardownPolicySpec) {
			s.Steps[0].Wait = &v1alpha1.WaitStep{Until: "size(kids) == 0"}
		}, []string{"spec.steps[0].wait.until", "undeclared reference to 'kids'"}},
		{"lookup in another namespace", func(s *v1alpha1.TeardownPolicySpec) {
			s.Steps[0].Wait = &v1alpha1.WaitStep{Until: "size(x) == 0", Lookups: []v1alpha1.Lookup{{Name: "x", APIVersion: "v1", Kind: "Pod", Namespace: "kube-system"}}}
		}, []string{`spec.steps[0].wait.lookups[0].namespace: Forbidden: a TeardownPolicy may look only in its own namespace "ns"`}},
		{"no steps", func(s *v1alpha1.TeardownPolicySpec) { s.Steps = nil },
			[]string{"spec.steps: Required value"}},
		{"several errors at once", func(s *v1alpha1.TeardownPolicySpec) {
			s.Match = "("
			s.Steps[0].When = ")"
		}, []string{"spec.match", "spec.steps[0].when"}},
	}
	c := compiler(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: validSpec()}
			tt.mutate(&p.Spec)
			v, err := ViewOf(p)
			if err != nil {
				t.Fatal(err)
			}
			got, errs := c.Compile(v)
			if got != nil || len(errs) == 0 {
				t.Fatalf("Compile succeeded, want errors %v", tt.want)
			}
			msg := errs.ToAggregate().Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

func TestCompileValid(t *testing.T) {
	c := compiler(t)
	cp := &v1alpha1.ClusterTeardownPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "dbs", UID: "u1", Generation: 3},
		Spec: v1alpha1.ClusterTeardownPolicySpec{
			TeardownPolicySpec: validSpec(),
			NamespaceSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
		},
	}
	cp.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	cp.Spec.Match = "object.spec.engine == 'postgres'"
	cp.Spec.Steps[0].When = "has(object.spec.snapshot)"
	v, _ := ViewOf(cp)
	got, errs := c.Compile(v)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got.GVK != (schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Database"}) {
		t.Errorf("GVK = %v", got.GVK)
	}
	if got.Finalizer != "clusterteardownpolicy.teardown.dev/dbs" || got.Generation != 3 || got.UID != "u1" {
		t.Errorf("compiled = %+v", got)
	}
	if got.Pipeline.FailurePolicy != v1alpha1.FailurePolicyRetain {
		t.Errorf("default failure policy = %q, want Retain", got.Pipeline.FailurePolicy)
	}
	tests := []struct {
		objLabels, nsLabels map[string]string
		namespaced          bool
		want                bool
	}{
		{map[string]string{"app": "db"}, map[string]string{"env": "prod"}, true, true},
		{map[string]string{"app": "db"}, map[string]string{"env": "dev"}, true, false},
		{map[string]string{"app": "web"}, map[string]string{"env": "prod"}, true, false},
		// The namespace selector does not apply to cluster-scoped objects.
		{map[string]string{"app": "db"}, nil, false, true},
		// What steps make for runs (Jobs, their pods) is never a target, whatever its labels.
		{map[string]string{"app": "db", "teardown.dev/run-uid": "r1"}, map[string]string{"env": "prod"}, true, false},
	}
	for _, tt := range tests {
		if got := got.Selects(tt.objLabels, tt.nsLabels, tt.namespaced); got != tt.want {
			t.Errorf("Selects(%v, %v, %v) = %v, want %v", tt.objLabels, tt.nsLabels, tt.namespaced, got, tt.want)
		}
	}
	for obj, want := range map[string]bool{"postgres": true, "mysql": false} {
		ok, err := got.MatchObject(context.Background(), map[string]any{"spec": map[string]any{"engine": obj}})
		if err != nil || ok != want {
			t.Errorf("MatchObject(engine=%s) = %v, %v; want %v", obj, ok, err, want)
		}
	}
	if !got.InScope("any") {
		t.Error("a cluster policy is in scope in every namespace")
	}
}

func TestNamespacedScope(t *testing.T) {
	c := compiler(t)
	p := &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "p"}, Spec: validSpec()}
	v, _ := ViewOf(p)
	got, errs := c.Compile(v)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !got.InScope("team-a") || got.InScope("team-b") || got.InScope("") {
		t.Error("a TeardownPolicy must be in scope in its own namespace only")
	}
	if got.Selector.String() != labels.Everything().String() {
		t.Errorf("unset selector = %q, want everything", got.Selector)
	}
}

func TestPipelineCachedPerGeneration(t *testing.T) {
	c := compiler(t)
	p := &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", Generation: 1}, Spec: validSpec()}
	v, _ := ViewOf(p)
	compiled, errs := c.Compile(v)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	run := &v1alpha1.TeardownRun{Spec: v1alpha1.TeardownRunSpec{
		PolicyRef: v1alpha1.PolicyReference{Kind: KindNamespaced, UID: "u", Generation: 1},
		Pipeline:  p.Spec.Pipeline,
	}}
	got, err := c.PipelineForRun(run)
	if err != nil || got != compiled.Pipeline {
		t.Errorf("PipelineForRun = %p, %v; want the pipeline compiled with the policy (%p)", got, err, compiled.Pipeline)
	}
	run.Spec.PolicyRef.Generation = 2
	run.Spec.Pipeline.Steps[0].When = "("
	if _, err := c.PipelineForRun(run); err == nil || !strings.Contains(err.Error(), "spec.pipeline.steps[0].when") {
		t.Errorf("a run's own invalid pipeline: err = %v", err)
	}
}

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	a := &Compiled{Key: Key{KindNamespaced, "ns1", "a"}, GVK: gvk}
	b := &Compiled{Key: Key{KindCluster, "", "b"}, GVK: gvk}
	r.Set(a)
	r.Set(b)
	if got := r.ForGVK(gvk); len(got) != 2 || got[0].Key.Kind != KindCluster {
		t.Errorf("ForGVK = %v, want both, sorted by key", got)
	}
	if k, ok := r.ForFinalizer("teardownpolicy.teardown.dev/a", "ns1"); !ok || k != a.Key {
		t.Errorf("ForFinalizer in ns1 = %v, %v", k, ok)
	}
	if _, ok := r.ForFinalizer("teardownpolicy.teardown.dev/a", "ns2"); ok {
		t.Error("a TeardownPolicy's finalizer in another namespace belongs to another policy")
	}
	r.SetInvalid(a.Key, gvk)
	if r.Get(a.Key) != nil || !r.Known(a.Key) || !r.UsesGVK(gvk) {
		t.Error("an invalid policy is known but not served")
	}
	r.Delete(a.Key)
	r.Delete(b.Key)
	if r.Known(a.Key) || r.UsesGVK(gvk) || len(r.GVKs()) != 0 {
		t.Error("deleted policies must be forgotten")
	}
}
