package policy_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
	"github.com/teardown-dev/teardown-operator/steps/builtin"
)

// policySeeds are the policies of the unit tables as YAML documents: compileChecks, and the
// corpus of kubectl teardown lint (its TestCorpus table) with the samples, a document each.
func policySeeds(f *testing.F) [][]byte {
	f.Helper()
	var out [][]byte
	for _, c := range compileChecks() {
		obj := c.view.Object.DeepCopyObject()
		obj.GetObjectKind().SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(c.view.Key.Kind))
		raw, err := sigsyaml.Marshal(obj)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, raw)
	}
	var files []string
	for _, pattern := range []string{"../../cli/lint/testdata/corpus/*/*.yaml", "../../samples/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		files = append(files, m...)
	}
	separator := regexp.MustCompile(`(?m)^---\s*$`)
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, doc := range separator.Split(string(raw), -1) {
			if strings.Contains(doc, "teardown.dev/") {
				out = append(out, []byte(doc))
			}
		}
	}
	return out
}

// FuzzCompilePolicy decodes arbitrary bytes as the operator reads a TeardownPolicy or
// ClusterTeardownPolicy (YAML or JSON, by apiVersion and kind, into the typed object) and
// compiles it with the built-in step kinds, as the engine does, and the pipeline of a run
// copied from it. Nothing may panic; a policy compiles exactly when it has no error, every error
// names a field under spec, and a run of a policy that compiles gets its pipeline.
func FuzzCompilePolicy(f *testing.F) {
	for _, s := range policySeeds(f) {
		f.Add(s)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	env, err := expr.NewEnv()
	if err != nil {
		f.Fatal(err)
	}
	kinds := steps.Build(builtin.Kinds(builtin.Options{}), steps.Deps{})
	// Without a cluster (kubectl teardown lint, and the operator when discovery cannot tell),
	// and with discovery (the scripted one of checks_test.go).
	compilers := []*policy.Compiler{policy.NewCompiler(env, kinds, nil), policy.NewCompiler(env, kinds, scope)}
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, _, err := decoder.Decode(data, nil, nil)
		if err != nil {
			return
		}
		cobj, ok := obj.(client.Object)
		if !ok {
			return
		}
		v, err := policy.ViewOf(cobj)
		if err != nil {
			return // another kind of the group
		}
		c := compilers[len(data)%len(compilers)]
		compiled, errs := c.Compile(v)
		if (compiled == nil) != (len(errs) > 0) {
			t.Fatalf("Compile = %v with errors %v: want exactly one", compiled, errs)
		}
		for _, e := range errs {
			if e.Field != "spec" && !strings.HasPrefix(e.Field, "spec.") {
				t.Errorf("error %q names no field under spec", e)
			}
		}
		spec := v.Spec
		run := &v1alpha1.TeardownRun{Spec: v1alpha1.TeardownRunSpec{
			PolicyRef: v1alpha1.PolicyReference{Kind: v.Key.Kind, Namespace: v.Key.Namespace, Name: v.Key.Name, UID: "fuzz", Generation: 1},
			Target:    v1alpha1.TargetObjectReference{APIVersion: spec.TargetRef.APIVersion, Kind: spec.TargetRef.Kind, Namespace: v.Key.Namespace, Name: "x"},
			Pipeline:  *spec.Pipeline.DeepCopy(),
		}}
		pipe, err := c.PipelineForRun(run)
		if compiled == nil {
			return
		}
		if err != nil || pipe == nil || len(pipe.Steps) != len(spec.Steps) {
			t.Fatalf("the policy compiles, but a run of it gets pipeline %v, error %v", pipe, err)
		}
		target := map[string]any{"apiVersion": spec.TargetRef.APIVersion, "kind": spec.TargetRef.Kind,
			"metadata": map[string]any{"name": "x", "namespace": "ns", "labels": map[string]any{"app": "db"}}}
		compiled.Selects(map[string]string{"app": "db"}, map[string]string{"env": "prod"}, true)
		_, _ = compiled.MatchObject(context.Background(), target)
	})
}
