package expr

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// errorSaying is a rendering expected to fail with this text.
type errorSaying string

// With TypedWhole, a string that is one ${...} and nothing else renders as the expression's value
// with its type; any other string renders as text, as it does without the option.
func TestTreeTypedWhole(t *testing.T) {
	env := treeEnv(t)
	tests := []struct {
		in         string
		typed, txt any // rendered with and without TypedWhole
	}{
		{`${object.metadata.name}`, "db", "db"},
		{`${1 + 2}`, int64(3), "3"},
		{`${9007199254740993}`, int64(9007199254740993), "9007199254740993"},
		{`${object.spec.replicas}`, float64(3), "3"},
		{`${2.5}`, 2.5, "2.5"},
		{`${true}`, true, "true"},
		{`${null}`, nil, errorSaying("value is null")}, // text has no null
		// An optional renders as its value, or null when it has none (a manifest leaves it out).
		{`${object.metadata.?labels[?'app.kubernetes.io/name']}`, "pg", `"pg"`},
		{`${object.metadata.?labels[?'missing']}`, nil, errorSaying("optional.none()")},
		{`${[1, 'a', [false]]}`, []any{int64(1), "a", []any{false}}, `[1,"a",[false]]`},
		{`${{'k': [1], 'n': {'m': 2.5}}}`, map[string]any{"k": []any{int64(1)}, "n": map[string]any{"m": 2.5}}, `{"k":[1],"n":{"m":2.5}}`},
		{`${object.metadata.labels}`, map[string]any{"app.kubernetes.io/name": "pg"}, `{"app.kubernetes.io/name":"pg"}`},
		{`${timestamp('2026-01-02T03:04:05Z')}`, "2026-01-02T03:04:05Z", `"2026-01-02T03:04:05Z"`}, // as text: JSON, as today
		{`n-${1}`, "n-1", "n-1"},
		{` ${1}`, " 1", " 1"},
		{`${1}${2}`, "12", "12"},
		{`$${1}`, "${1}", "${1}"},
		{`plain`, "plain", "plain"},
	}
	for _, tc := range tests {
		for _, typed := range []bool{true, false} {
			in := map[string]any{"spec": map[string]any{"v": tc.in}}
			tree, errs := env.CompileTreeWith(in, field.NewPath("manifest"), TreeOptions{TypedWhole: typed})
			if len(errs) > 0 {
				t.Fatalf("%s: %v", tc.in, errs)
			}
			want := tc.txt
			if typed {
				want = tc.typed
			}
			got, err := tree.Render(context.Background(), treeVars())
			if e, ok := want.(errorSaying); ok {
				if err == nil || !strings.Contains(err.Error(), string(e)) {
					t.Errorf("%s (typed %v): error %v, want one saying %q", tc.in, typed, err, e)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s (typed %v): %v", tc.in, typed, err)
			}
			if v := got.(map[string]any)["spec"].(map[string]any)["v"]; !reflect.DeepEqual(v, want) {
				t.Errorf("%s (typed %v) = %#v, want %#v", tc.in, typed, v, want)
			}
		}
	}
}

// A whole value JSON cannot hold fails the render, naming the string's path; it counts as a
// string known only when rendered.
func TestTreeTypedWholeErrors(t *testing.T) {
	env := treeEnv(t)
	for src, want := range map[string]string{
		`${{1: 'a'}}`:              "keys are strings",
		`${0.0 / 0.0}`:             "not a JSON number",
		`${18446744073709551615u}`: "does not fit",
		`${[1, {2: 3}]}`:           "[1]: a map key of type int",
		`${object.missing}`:        "no such key",
	} {
		in := map[string]any{"spec": []any{"fixed", src}}
		tree, errs := env.CompileTreeWith(in, field.NewPath("manifest"), TreeOptions{TypedWhole: true})
		if len(errs) > 0 {
			t.Fatalf("%s: %v", src, errs)
		}
		_, err := tree.Render(context.Background(), treeVars())
		if err == nil || !strings.Contains(err.Error(), "manifest.spec[1]") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming manifest.spec[1] and saying %q", src, err, want)
		}
		if tree.Templated() != 1 || !tree.RenderedAt("manifest.spec[1]") || tree.RenderedAt("manifest.spec[0]") {
			t.Errorf("%s: templated %d, rendered at spec[1] %v, at spec[0] %v; want 1, true, false",
				src, tree.Templated(), tree.RenderedAt("manifest.spec[1]"), tree.RenderedAt("manifest.spec[0]"))
		}
		if p := tree.Placeholder("X"); !reflect.DeepEqual(p, map[string]any{"spec": []any{"fixed", "X"}}) {
			t.Errorf("%s: placeholder %#v", src, p)
		}
	}
}
