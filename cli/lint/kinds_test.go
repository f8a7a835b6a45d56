package lint_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/teardown-dev/teardown-operator/cli/discovery"
	"github.com/teardown-dev/teardown-operator/cli/lint"
	"github.com/teardown-dev/teardown-operator/cli/manifest"
)

// policyOn is a policy of kind on apiVersion/target with one wait step.
func policyOn(kind, apiVersion, target string) string {
	ns := ""
	if kind == "TeardownPolicy" {
		ns = "\n  namespace: team"
	}
	return `apiVersion: teardown.dev/v1alpha1
kind: ` + kind + `
metadata:
  name: p` + ns + `
spec:
  targetRef: {apiVersion: ` + apiVersion + `, kind: ` + target + `}
  timeout: 1m
  steps:
  - name: pause
    wait: {duration: 1s}
`
}

// TestKindScope: target kinds are checked as the operator checks them against discovery: with
// --kinds against the dump, without it against the built-in kinds (a custom kind is unknown).
// A TeardownPolicy on a cluster-scoped kind is the operator's InvalidTarget, in its words.
func TestKindScope(t *testing.T) {
	dump := discovery.FromLists("kinds.json", []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true}, {Name: "namespaces", Kind: "Namespace"}}},
		{GroupVersion: "example.teardown.dev/v1", APIResources: []metav1.APIResource{
			{Name: "clusterbackends", Kind: "ClusterBackend"}, {Name: "manageddatabases", Kind: "ManagedDatabase", Namespaced: true}}},
	})
	const invalidTarget = "is cluster-scoped; a TeardownPolicy protects only objects in its own namespace (use a ClusterTeardownPolicy); the operator reports the policy not Ready, reason InvalidTarget"
	tests := map[string]struct {
		kinds  *discovery.Kinds
		policy string
		field  string // "" for no error
		words  string
	}{
		"built-in: a TeardownPolicy on Namespace":            {policy: policyOn("TeardownPolicy", "v1", "Namespace"), field: "spec.targetRef", words: "Namespace " + invalidTarget},
		"built-in: a TeardownPolicy on ClusterRole":          {policy: policyOn("TeardownPolicy", "rbac.authorization.k8s.io/v1", "ClusterRole"), field: "spec.targetRef", words: "ClusterRole " + invalidTarget},
		"built-in: a ClusterTeardownPolicy on Namespace":     {policy: policyOn("ClusterTeardownPolicy", "v1", "Namespace")},
		"built-in: a TeardownPolicy on ConfigMap":            {policy: policyOn("TeardownPolicy", "v1", "ConfigMap")},
		"built-in: a custom kind is unknown, and not judged": {policy: policyOn("TeardownPolicy", "example.teardown.dev/v1", "ClusterBackend")},
		"--kinds: a TeardownPolicy on a cluster-scoped custom kind": {kinds: dump, policy: policyOn("TeardownPolicy", "example.teardown.dev/v1", "ClusterBackend"),
			field: "spec.targetRef", words: "ClusterBackend " + invalidTarget},
		"--kinds: a TeardownPolicy on a namespaced custom kind": {kinds: dump, policy: policyOn("TeardownPolicy", "example.teardown.dev/v1", "ManagedDatabase")},
		"--kinds: a kind the dump does not serve": {kinds: dump, policy: policyOn("ClusterTeardownPolicy", "example.teardown.dev/v1", "Widget"),
			field: "spec.targetRef.kind", words: "is not served (not in kinds.json)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			docs, err := manifest.Parse("p.yaml", []byte(tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			l, err := lint.New(lint.Options{Kinds: tc.kinds})
			if err != nil {
				t.Fatal(err)
			}
			var errs []lint.Problem
			for _, p := range l.Lint(context.Background(), docs).Problems {
				if p.Severity == lint.Error {
					errs = append(errs, p)
				}
			}
			if tc.field == "" {
				if len(errs) > 0 {
					t.Fatalf("want no error, got %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs[0].Message, tc.words) {
				t.Fatalf("want one error at %s saying %q, got %v", tc.field, tc.words, errs)
			}
		})
	}
}

// TestBuiltinKinds: the embedded table reads, and knows the kinds' scopes.
func TestBuiltinKinds(t *testing.T) {
	table := discovery.Builtin()
	if !strings.HasPrefix(table.Kubernetes, "v1.36.") || len(table.Kinds) < 50 {
		t.Fatalf("table of Kubernetes %q with %d kinds", table.Kubernetes, len(table.Kinds))
	}
	for gvk, want := range map[[3]string]bool{{"", "v1", "ConfigMap"}: true, {"", "v1", "Namespace"}: false, {"apps", "v1", "Deployment"}: true,
		{"storage.k8s.io", "v1", "StorageClass"}: false, {"batch", "v1", "Job"}: true} {
		got, err := discovery.BuiltinKinds().Namespaced(gvkOf(gvk))
		if err != nil || got != want {
			t.Errorf("%v: namespaced %v (%v), want %v", gvk, got, err, want)
		}
	}
}

func gvkOf(g [3]string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: g[0], Version: g[1], Kind: g[2]}
}

// TestResourceStepKinds: with --kinds, a resource step on a kind the dump does not serve is a
// kind-not-served warning, and one on a cluster-scoped custom kind in a TeardownPolicy an error.
func TestResourceStepKinds(t *testing.T) {
	dump := discovery.FromLists("kinds.json", []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true}}},
		{GroupVersion: "example.teardown.dev/v1", APIResources: []metav1.APIResource{{Name: "clusterbackends", Kind: "ClusterBackend"}}},
	})
	policy := func(step string) string {
		return `apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata: {name: p, namespace: team}
spec:
  targetRef: {apiVersion: v1, kind: ConfigMap}
  timeout: 1m
  steps:
  - name: act
    resource:
      serviceAccountName: actor
` + step
	}
	tests := map[string]struct {
		step, field, words string
		severity           lint.Severity
	}{
		"a manifest of a kind not served": {step: "      action: Create\n      manifest: {apiVersion: snapshot.storage.k8s.io/v1, kind: VolumeSnapshot, metadata: {name: x}}\n",
			field: "spec.steps[0].resource.manifest.kind", words: "the step fails when it runs unless the kind is served by then", severity: lint.Warning},
		"a target of a kind not served": {step: "      action: Delete\n      target: {apiVersion: velero.io/v1, kind: Backup, name: x}\n",
			field: "spec.steps[0].resource.target.kind", words: "the step fails when it runs unless the kind is served by then", severity: lint.Warning},
		"a cluster-scoped custom kind": {step: "      action: Delete\n      target: {apiVersion: example.teardown.dev/v1, kind: ClusterBackend, name: x}\n",
			field: "spec.steps[0].resource.target.kind", words: "ClusterBackend is cluster-scoped; a TeardownPolicy acts only on objects in its own namespace", severity: lint.Error},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			docs, err := manifest.Parse("p.yaml", []byte(policy(tc.step)))
			if err != nil {
				t.Fatal(err)
			}
			l, err := lint.New(lint.Options{Kinds: dump})
			if err != nil {
				t.Fatal(err)
			}
			problems := l.Lint(context.Background(), docs).Problems
			if len(problems) != 1 || problems[0].Field != tc.field || problems[0].Severity != tc.severity || !strings.Contains(problems[0].Message, tc.words) {
				t.Fatalf("want one problem at %s saying %q, got %+v", tc.field, tc.words, problems)
			}
		})
	}
}
