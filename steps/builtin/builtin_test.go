package builtin

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// The CRDs name the step kinds twice: a step sets exactly one of them, and a wait step's lookup
// may not take a variable's name (the engine's, and each kind's own). Both rules must say what
// the registered kinds are, or the API server refuses a step the operator runs, or lets through
// a lookup name that shadows a variable.
func TestCRDRulesNameTheRegisteredKinds(t *testing.T) {
	reg := steps.Build(Kinds(Options{}), steps.Deps{})
	var kinds, reserved []string
	reserved = append(reserved, expr.Builtins()...)
	for _, k := range reg {
		kinds = append(kinds, k.Name())
		if d, ok := k.(steps.VariableDeclarer); ok {
			reserved = append(reserved, d.Variables()...)
		}
	}
	slices.Sort(kinds)
	slices.Sort(reserved)
	for _, file := range []string{"teardown.dev_teardownpolicies.yaml", "teardown.dev_clusterteardownpolicies.yaml", "teardown.dev_teardownruns.yaml"} {
		rules := rulesOf(t, filepath.Join("..", "..", "config", "crd", "bases", file))
		oneOf, names := 0, 0
		for _, r := range rules {
			if strings.Contains(r, "filter(k, k).size() == 1") {
				oneOf++
				if got := sorted(regexp.MustCompile(`has\(self\.(\w+)\)`).FindAllStringSubmatch(r, -1)); !slices.Equal(got, kinds) {
					t.Errorf("%s: a step's one-of rule names %v; the registered kinds are %v", file, got, kinds)
				}
			}
			if strings.HasPrefix(r, "!(self in [") {
				names++
				if got := sorted(regexp.MustCompile(`'(\w+)'`).FindAllStringSubmatch(r, -1)); !slices.Equal(got, reserved) {
					t.Errorf("%s: the reserved-name rule names %v; the variables are %v", file, got, reserved)
				}
			}
		}
		if oneOf == 0 || names == 0 {
			t.Errorf("%s: found %d one-of rules and %d reserved-name rules; expected both", file, oneOf, names)
		}
	}
}

// rulesOf returns every x-kubernetes-validations rule in a CRD's schema.
func rulesOf(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(s *apiextensionsv1.JSONSchemaProps)
	walk = func(s *apiextensionsv1.JSONSchemaProps) {
		if s == nil {
			return
		}
		for _, v := range s.XValidations {
			out = append(out, v.Rule)
		}
		for _, p := range s.Properties {
			walk(&p)
		}
		if s.Items != nil {
			walk(s.Items.Schema)
		}
		if s.AdditionalProperties != nil {
			walk(s.AdditionalProperties.Schema)
		}
	}
	for _, v := range crd.Spec.Versions {
		walk(v.Schema.OpenAPIV3Schema)
	}
	return out
}

func sorted(matches [][]string) []string {
	var out []string
	for _, m := range matches {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return slices.Compact(out)
}
