package lint

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestDropScalar(t *testing.T) {
	obj := map[string]any{"spec": map[string]any{
		"timeout": "five minutes",
		"steps":   []any{map[string]any{"name": "a", "timeout": 5}, "x"},
		"labels":  map[string]any{"app.kubernetes.io/name": 1},
	}}
	for _, p := range []string{"spec.timeout", "spec.steps[0].timeout", "spec.steps[1]", "spec.labels[app.kubernetes.io/name]", "spec.steps", "spec.nothing.here", "spec.steps[7]"} {
		dropScalar(obj, p)
	}
	want := map[string]any{"spec": map[string]any{
		"steps":  []any{map[string]any{"name": "a"}, nil}, // a list keeps its indexes
		"labels": map[string]any{},
	}}
	if !reflect.DeepEqual(obj, want) {
		t.Errorf("dropScalar left %v, want %v", obj, want)
	}
}

func TestRepeats(t *testing.T) {
	unknown := &field.Error{Type: field.ErrorTypeInvalid, Field: "spec.steps[0].htpp", Detail: "unknown field (kubectl apply refuses it)"}
	pattern := field.Invalid(field.NewPath("spec", "steps").Index(1).Child("timeout"), "five", "should match")
	tests := []struct {
		compile string
		schema  *field.Error
		want    bool
	}{
		{"spec.steps[0]", unknown, true}, // the misspelt kind: the step has none
		{"spec.steps[0].htpp.url", unknown, true},
		{"spec.steps", unknown, false},
		{"spec.steps[1].timeout", pattern, true},
		{"spec.steps[1]", pattern, false}, // a step's own error stays
		{"spec.steps[10].timeout", pattern, false},
	}
	for _, tc := range tests {
		if got := repeats(&field.Error{Field: tc.compile}, tc.schema); got != tc.want {
			t.Errorf("repeats(%s, %s) = %v, want %v", tc.compile, tc.schema.Field, got, tc.want)
		}
	}
}
