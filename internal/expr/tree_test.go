package expr

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// treeEnv and treeVars are the environment and variables of the tree tests.
func treeEnv(t *testing.T) *Env {
	t.Helper()
	env, err := NewEnv()
	if err != nil {
		t.Fatalf("NewEnv: %v", err)
	}
	return env
}

func treeVars() Vars {
	return Vars{
		VarObject: map[string]any{
			"metadata": map[string]any{
				"name":      "db",
				"namespace": "prod",
				"labels":    map[string]any{"app.kubernetes.io/name": "pg"},
			},
			"spec": map[string]any{"replicas": float64(3)},
		},
		VarSteps: map[string]any{},
		VarRun:   map[string]any{},
	}
}

// decodeJSON decodes a JSON text as the job step does: numbers become float64.
func decodeJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decoding %s: %v", s, err)
	}
	return v
}

func TestTreeRender(t *testing.T) {
	env := treeEnv(t)
	tests := []struct {
		name string
		in   any
		want any
	}{
		{
			name: "literals keep shape and types",
			in:   decodeJSON(t, `{"a": {"b": [1, 2.5, -3, true, false, null, "x", [], {}]}, "c": 0, "d": ""}`),
			want: map[string]any{
				"a": map[string]any{"b": []any{float64(1), 2.5, float64(-3), true, false, nil, "x", []any{}, map[string]any{}}},
				"c": float64(0),
				"d": "",
			},
		},
		{
			name: "Go values that are not JSON-decoded keep their type",
			in:   map[string]any{"i": int64(7), "u": uint32(8), "f": float32(1.5)},
			want: map[string]any{"i": int64(7), "u": uint32(8), "f": float32(1.5)},
		},
		{
			name: "interpolations in nested strings",
			in: decodeJSON(t, `{"template": {"spec": {"containers": [{"name": "dump-${object.metadata.name}",
				"command": ["sh", "-c", "echo ${object.metadata.namespace}/${object.metadata.name}"],
				"args": ["${object.spec.replicas}", "${object.metadata.labels['app.kubernetes.io/name']}"]}]}},
				"backoffLimit": 2}`),
			want: map[string]any{
				"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
					"name":    "dump-db",
					"command": []any{"sh", "-c", "echo prod/db"},
					"args":    []any{"3", "pg"},
				}}}},
				"backoffLimit": float64(2),
			},
		},
		{
			name: "escape in a pure literal",
			in:   decodeJSON(t, `{"command": ["sh", "-c", "echo $${HOME}"]}`),
			want: map[string]any{"command": []any{"sh", "-c", "echo ${HOME}"}},
		},
		{
			name: "escape next to an interpolation",
			in:   decodeJSON(t, `{"command": ["$${HOME}/${object.metadata.name}", "${object.metadata.name}$${X}"]}`),
			want: map[string]any{"command": []any{"${HOME}/db", "db${X}"}},
		},
		{
			name: "empty map survives",
			in:   decodeJSON(t, `{}`),
			want: map[string]any{},
		},
		{
			name: "empty array survives",
			in:   decodeJSON(t, `[]`),
			want: []any{},
		},
		{
			name: "top-level template string",
			in:   "${object.metadata.name}",
			want: "db",
		},
		{
			name: "top-level literal string",
			in:   "$${x}",
			want: "${x}",
		},
		{
			name: "top-level number",
			in:   float64(42),
			want: float64(42),
		},
		{
			name: "top-level null",
			in:   nil,
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, errs := env.CompileTree(tt.in, field.NewPath("spec"))
			if len(errs) > 0 {
				t.Fatalf("CompileTree: %v", errs)
			}
			got, err := tree.Render(context.Background(), treeVars())
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Render =\n%#v\nwant\n%#v", got, tt.want)
			}
		})
	}
}

// TestTreeRenderEmptyContainers checks that empty maps and arrays render as empty values, not
// nil ones (which would marshal as null).
func TestTreeRenderEmptyContainers(t *testing.T) {
	env := treeEnv(t)
	tree, errs := env.CompileTree(decodeJSON(t, `{"m": {}, "a": [], "deep": [{"m": {}, "a": []}]}`), field.NewPath("spec"))
	if len(errs) > 0 {
		t.Fatalf("CompileTree: %v", errs)
	}
	got, err := tree.Render(context.Background(), treeVars())
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	if want := `{"a":[],"deep":[{"a":[],"m":{}}],"m":{}}`; string(b) != want {
		t.Errorf("rendered JSON %s, want %s", b, want)
	}
	m := got.(map[string]any)
	if m["m"].(map[string]any) == nil {
		t.Error("empty map rendered as a nil map")
	}
	if m["a"].([]any) == nil {
		t.Error("empty array rendered as a nil slice")
	}
}

// TestTreeRenderFreshValues checks that each render returns new maps and slices, so changing one
// result (as the job step does with the rendered spec) cannot leak into the next.
func TestTreeRenderFreshValues(t *testing.T) {
	env := treeEnv(t)
	in := decodeJSON(t, `{"labels": {"a": "1"}, "args": ["${object.metadata.name}"]}`)
	tree, errs := env.CompileTree(in, field.NewPath("spec"))
	if len(errs) > 0 {
		t.Fatalf("CompileTree: %v", errs)
	}
	first, err := tree.Render(context.Background(), treeVars())
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	first.(map[string]any)["labels"].(map[string]any)["a"] = "changed"
	first.(map[string]any)["args"].([]any)[0] = "changed"
	in.(map[string]any)["labels"].(map[string]any)["a"] = "input changed"

	second, err := tree.Render(context.Background(), treeVars().With(VarObject, map[string]any{"metadata": map[string]any{"name": "other"}}))
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	want := map[string]any{"labels": map[string]any{"a": "1"}, "args": []any{"other"}}
	if !reflect.DeepEqual(second, want) {
		t.Errorf("second Render = %#v, want %#v", second, want)
	}
}

func TestCompileTreeErrors(t *testing.T) {
	env := treeEnv(t)
	const hint = "(write $${ for a literal ${)"
	type wantErr struct {
		field  string
		value  string
		detail string // a part of the detail, besides the hint
	}
	tests := []struct {
		name string
		in   string
		want []wantErr
	}{
		{
			name: "undeclared variable in a command",
			in:   `{"template": {"spec": {"containers": [{"command": ["sh", "echo ${HOME}"]}]}}}`,
			want: []wantErr{{"spec.template.spec.containers[0].command[1]", "echo ${HOME}", "undeclared reference to 'HOME'"}},
		},
		{
			name: "unterminated interpolation",
			in:   `{"image": "busybox:${object.metadata.name"}`,
			want: []wantErr{{"spec.image", "busybox:${object.metadata.name", "unterminated ${"}},
		},
		{
			name: "empty interpolation",
			in:   `{"args": ["ok", "${}"]}`,
			want: []wantErr{{"spec.args[1]", "${}", "expression is empty"}},
		},
		{
			name: "several broken strings, in key and index order",
			in: `{"z": "${HOME}", "a": {"b": ["${object.metadata.name}", "${USER}"]},
				"m": [{"k": "${"}], "fine": "$${HOME}"}`,
			want: []wantErr{
				{"spec.a.b[1]", "${USER}", "undeclared reference to 'USER'"},
				{"spec.m[0].k", "${", "unterminated ${"},
				{"spec.z", "${HOME}", "undeclared reference to 'HOME'"},
			},
		},
		{
			name: "no errors for valid strings",
			in:   `{"a": "${object.metadata.name}", "b": "$${HOME}", "c": 1}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, errs := env.CompileTree(decodeJSON(t, tt.in), field.NewPath("spec"))
			if tree == nil {
				t.Fatal("CompileTree returned no tree")
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("CompileTree gave %d errors, want %d: %v", len(errs), len(tt.want), errs)
			}
			for i, w := range tt.want {
				e := errs[i]
				if e.Type != field.ErrorTypeInvalid {
					t.Errorf("error %d: type %s, want %s", i, e.Type, field.ErrorTypeInvalid)
				}
				if e.Field != w.field {
					t.Errorf("error %d: field %q, want %q", i, e.Field, w.field)
				}
				if e.BadValue != w.value {
					t.Errorf("error %d: value %#v, want %q", i, e.BadValue, w.value)
				}
				if !strings.Contains(e.Detail, w.detail) {
					t.Errorf("error %d: detail %q does not mention %q", i, e.Detail, w.detail)
				}
				if !strings.HasSuffix(e.Detail, hint) {
					t.Errorf("error %d: detail %q does not end with %q", i, e.Detail, hint)
				}
			}
		})
	}
}

func TestTreeRenderErrors(t *testing.T) {
	env := treeEnv(t)
	tests := []struct {
		name     string
		in       string
		wantPath string
		wantErr  string
	}{
		{
			name:     "missing key in a container field",
			in:       `{"template": {"spec": {"containers": [{"name": "x", "image": "${object.spec.image}"}]}}}`,
			wantPath: "spec.template.spec.containers[0].image",
			wantErr:  "no such key: image",
		},
		{
			name:     "null value in an argument",
			in:       `{"args": ["ok", "${ null }"]}`,
			wantPath: "spec.args[1]",
			wantErr:  "value is null",
		},
		{
			name:     "failing string next to good ones",
			in:       `{"a": "${object.metadata.name}", "b": {"c": "x-${object.metadata.labels.owner}"}}`,
			wantPath: "spec.b.c",
			wantErr:  "no such key: owner",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, errs := env.CompileTree(decodeJSON(t, tt.in), field.NewPath("spec"))
			if len(errs) > 0 {
				t.Fatalf("CompileTree: %v", errs)
			}
			got, err := tree.Render(context.Background(), treeVars())
			if err == nil {
				t.Fatalf("Render = %#v, want an error", got)
			}
			if got != nil {
				t.Errorf("Render returned %#v with an error", got)
			}
			if !strings.HasPrefix(err.Error(), tt.wantPath+": ") {
				t.Errorf("error %q does not start with the path %q", err, tt.wantPath)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestTreePlaceholder(t *testing.T) {
	env := treeEnv(t)
	tests := []struct {
		name string
		in   string
		want any
	}{
		{
			name: "templated and broken strings are replaced, nothing else",
			in: `{"image": "${object.spec.image}", "name": "dump-${object.metadata.name}", "broken": "${HOME}",
				"unterminated": "x${", "literal": "busybox", "escaped": "$${HOME}", "n": 3, "b": true, "nil": null,
				"list": ["a", "${object.metadata.name}", 1, {"deep": "${run.name}"}], "empty": {}, "none": []}`,
			want: map[string]any{
				"image": "P", "name": "P", "broken": "P", "unterminated": "P",
				"literal": "busybox", "escaped": "${HOME}", "n": float64(3), "b": true, "nil": nil,
				"list":  []any{"a", "P", float64(1), map[string]any{"deep": "P"}},
				"empty": map[string]any{}, "none": []any{},
			},
		},
		{
			name: "top-level template",
			in:   `"${object.metadata.name}"`,
			want: "P",
		},
		{
			name: "top-level literal",
			in:   `"plain"`,
			want: "plain",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, _ := env.CompileTree(decodeJSON(t, tt.in), field.NewPath("spec"))
			got := tree.Placeholder("P")
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Placeholder =\n%#v\nwant\n%#v", got, tt.want)
			}
		})
	}
}

func TestTreeRenderedAt(t *testing.T) {
	env := treeEnv(t)
	tree, _ := env.CompileTree(decodeJSON(t, `{"containers": [{"name": "c", "image": "${object.spec.image}",
		"env": [{"name": "A", "value": "x${"}]}, {"name": "d", "image": "busybox", "args": ["$${HOME}"]}],
		"containersX": [{"image": "busybox"}]}`), field.NewPath("spec"))
	for path, want := range map[string]bool{
		"spec.containers[0].image":        true, // an expression
		"spec.containers[0].env[0].value": true, // did not compile: known only by what it renders
		"spec.containers[0].env[0]":       true, // something under it
		"spec.containers[0]":              true,
		"spec.containers":                 true,
		"spec":                            true,
		"spec.containers[0].name":         false, // literal
		"spec.containers[1]":              false, // an escaped ${ is a literal
		"spec.containers[1].image":        false,
		"spec.containersX":                false, // a sibling whose name starts alike
		"spec.containers[0].imag":         false,
	} {
		if got := tree.RenderedAt(path); got != want {
			t.Errorf("RenderedAt(%s) = %v, want %v", path, got, want)
		}
	}
}
