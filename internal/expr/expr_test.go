package expr

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

func newEnv(t *testing.T) *Env {
	t.Helper()
	env, err := NewEnv()
	if err != nil {
		t.Fatalf("NewEnv: %v", err)
	}
	return env
}

// testObject is a target as decoded from JSON: numbers are float64.
func testObject() map[string]any {
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":      "db",
			"namespace": "prod",
			"labels": map[string]any{
				"tier":                   "prod",
				"app.kubernetes.io/name": "pg",
			},
		},
		"spec": map[string]any{
			"replicas": float64(3),
			"ports": []any{
				map[string]any{"name": "pg", "port": float64(5432)},
				map[string]any{"name": "metrics", "port": float64(9187)},
			},
		},
	}
}

func testVars() Vars {
	return Vars{
		VarObject: testObject(),
		VarSteps: map[string]any{
			"drain": map[string]any{"phase": "Succeeded", "outputs": map[string]any{"count": int64(2)}},
		},
		VarRun: map[string]any{"name": "db-x1", "uid": "u-1", "attempt": int64(2)},
	}
}

func TestReserved(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"object", true},
		{"steps", true},
		{"run", true},
		{"response", true},
		{"job", true},
		{"now", true},
		{"pods", false},
		{"Object", false},
		{"", false},
		{"objects", false},
	}
	env := newEnv(t).Reserve("response", "job")
	for _, tt := range tests {
		if got := env.Reserved(tt.name); got != tt.want {
			t.Errorf("Reserved(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
	if newEnv(t).Reserved("response") {
		t.Error("response is reserved by the http step kind, not by expr")
	}
}

func TestConditionEval(t *testing.T) {
	env := newEnv(t)
	tests := []struct {
		src  string
		want bool
	}{
		{"object.metadata.name == 'db'", true},
		{"object.metadata.name == 'other'", false},
		{"object.metadata.namespace != 'prod'", false},
		{"object.metadata.labels['tier'] == 'prod'", true},
		{"object.metadata.labels['tier'] == 'dev'", false},
		{"object.metadata.labels['app.kubernetes.io/name'] == 'pg'", true},
		{"'tier' in object.metadata.labels", true},
		{"'owner' in object.metadata.labels", false},
		{"has(object.metadata.labels)", true},
		{"has(object.metadata.labels.tier)", true},
		{"has(object.metadata.annotations)", false},
		{"has(object.status)", false},
		{"object.spec.replicas == 3", true},
		{"object.spec.replicas > 2", true},
		{"object.spec.replicas < 3", false},
		{"object.spec.ports[0].port == 5432", true},
		{"object.spec.ports.exists(p, p.port == 80)", false},
		{"object.spec.ports.all(p, p.port > 1024)", true},
		{"object.spec.ports.map(p, p.name) == ['pg', 'metrics']", true},
		{"size(object.spec.ports) == 2", true},
		{"object.?metadata.?annotations.orValue({}).size() == 0", true},
		{"object.metadata.name.upperAscii() == 'DB'", true},
		{"steps.drain.phase == 'Succeeded'", true},
		{"steps.drain.outputs.count == 2", true},
		{"'cleanup' in steps", false},
		{"run.attempt > 1 && run.name.startsWith('db-')", true},
		{"true", true},
		{"false", false},
	}
	for _, tt := range tests {
		p, err := env.CompileCondition(tt.src)
		if err != nil {
			t.Errorf("CompileCondition(%q): %v", tt.src, err)
			continue
		}
		if p.String() != tt.src {
			t.Errorf("String() = %q, want %q", p.String(), tt.src)
		}
		got, err := p.EvalBool(context.Background(), testVars())
		if err != nil {
			t.Errorf("EvalBool(%q): %v", tt.src, err)
			continue
		}
		if got != tt.want {
			t.Errorf("EvalBool(%q) = %v, want %v", tt.src, got, tt.want)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	env := newEnv(t)
	tests := []struct {
		name    string
		src     string
		cond    bool // CompileCondition rather than CompileValue
		wantErr string
	}{
		{"empty condition", "", true, "expression is empty"},
		{"blank condition", " \t\n", true, "expression is empty"},
		{"empty value", "", false, "expression is empty"},
		{"int condition", "1 + 1", true, "must evaluate to bool, not int"},
		{"string condition", "'yes'", true, "must evaluate to bool, not string"},
		{"list condition", "[1, 2].map(x, x)", true, "must evaluate to bool, not list(int)"},
		{"map condition", "run", true, "must evaluate to bool, not map(string, dyn)"},
		{"undeclared variable", "foo == 1", true,
			"ERROR: <input>:1:1: undeclared reference to 'foo' (in container '')\n | foo == 1\n | ^"},
		{"undeclared variable in value", "pods", false,
			"ERROR: <input>:1:1: undeclared reference to 'pods' (in container '')\n | pods\n | ^"},
		{"syntax error", "object.metadata.", true,
			"ERROR: <input>:1:17: Syntax error: no viable alternative at input '.'\n | object.metadata.\n | ................^"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			compile := env.CompileValue
			if tt.cond {
				compile = env.CompileCondition
			}
			p, err := compile(tt.src)
			if err == nil {
				t.Fatalf("compiling %q: no error, want %q", tt.src, tt.wantErr)
			}
			if p != nil {
				t.Errorf("compiling %q: program %v returned with error", tt.src, p)
			}
			if err.Error() != tt.wantErr {
				t.Errorf("compiling %q: error\n%q\nwant\n%q", tt.src, err.Error(), tt.wantErr)
			}
		})
	}
}

// A condition over dynamic values compiles; its result type is checked when it runs.
func TestCompileConditionAcceptsDyn(t *testing.T) {
	env := newEnv(t)
	for _, src := range []string{"object.metadata.name", "steps.drain.outputs.ok", "object"} {
		if _, err := env.CompileCondition(src); err != nil {
			t.Errorf("CompileCondition(%q): %v, want no error", src, err)
		}
	}
	// CompileValue takes any type.
	for _, src := range []string{"1 + 1", "'a'", "[1]", "run", "null"} {
		if _, err := env.CompileValue(src); err != nil {
			t.Errorf("CompileValue(%q): %v, want no error", src, err)
		}
	}
}

func TestEvalBoolErrors(t *testing.T) {
	env := newEnv(t)
	tests := []struct {
		name    string
		src     string
		vars    Vars
		wantErr string
	}{
		{"missing key", "object.metadata.missing == 'x'", testVars(),
			`evaluating "object.metadata.missing == 'x'": no such key: missing`},
		{"missing label", "object.metadata.labels['owner'] == 'x'", testVars(),
			`evaluating "object.metadata.labels['owner'] == 'x'": no such key: owner`},
		{"index out of range", "object.spec.ports[5].port == 1", testVars(),
			`evaluating "object.spec.ports[5].port == 1": index out of bounds: 5`},
		{"unbound variable", "object.metadata.name == 'db'", nil,
			`evaluating "object.metadata.name == 'db'": no such attribute(s): object`},
		{"dyn string", "object.metadata.name", testVars(),
			`evaluating "object.metadata.name": got string, want bool`},
		{"dyn map", "object.metadata.labels", testVars(),
			`evaluating "object.metadata.labels": got map, want bool`},
		{"dyn double", "object.spec.replicas", testVars(),
			`evaluating "object.spec.replicas": got double, want bool`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := env.CompileCondition(tt.src)
			if err != nil {
				t.Fatalf("CompileCondition(%q): %v", tt.src, err)
			}
			got, err := p.EvalBool(context.Background(), tt.vars)
			if err == nil {
				t.Fatalf("EvalBool(%q) = %v, want error %q", tt.src, got, tt.wantErr)
			}
			if got {
				t.Errorf("EvalBool(%q) returned true with an error", tt.src)
			}
			if err.Error() != tt.wantErr {
				t.Errorf("EvalBool(%q) error\n%q\nwant\n%q", tt.src, err.Error(), tt.wantErr)
			}
		})
	}
}

func TestCostLimit(t *testing.T) {
	env := newEnv(t)
	big := make([]any, 1000)
	for i := range big {
		big[i] = int64(i)
	}
	withItems, err := env.Extend([]string{"items"}, nil)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	tests := []struct {
		name string
		env  *Env
		src  string
		vars Vars
	}{
		{"list built in the expression", env,
			"[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, " +
				"[1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5,6,7,8,9,10].map(e, [1,2,3,4,5,6,7,8,9,10].map(f, f)))))).size() > 0",
			nil},
		{"range built in the expression", env,
			"lists.range(1000).map(a, lists.range(1000).map(b, a + b)).size() > 0", nil},
		{"nested map over a large input list", withItems,
			"items.map(a, items.map(b, a + b)).size() > 0", Vars{"items": big}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tt.env.CompileCondition(tt.src)
			if err != nil {
				t.Fatalf("CompileCondition: %v", err)
			}
			got, err := p.EvalBool(context.Background(), tt.vars)
			if err == nil {
				t.Fatalf("EvalBool = %v, want a cost limit error", got)
			}
			want := "evaluating " + strconv.Quote(tt.src) + ": operation cancelled: actual cost limit exceeded (one evaluation may cost at most 1000000 CEL cost units)"
			if err.Error() != want {
				t.Errorf("EvalBool error\n%q\nwant\n%q", err.Error(), want)
			}
		})
	}

	// Just under the limit, the same shape of expression evaluates.
	small := big[:100]
	p, err := withItems.CompileCondition("items.map(a, items.map(b, a + b)).size() > 0")
	if err != nil {
		t.Fatalf("CompileCondition: %v", err)
	}
	got, err := p.EvalBool(context.Background(), Vars{"items": small})
	if err != nil || !got {
		t.Errorf("EvalBool over 100 items = %v, %v; want true, nil", got, err)
	}
}

// TestEvalTimeLimit: one long comprehension under the cost limit takes cel-go's cost tracker time
// quadratic in its length (half a minute for this one); MaxEvalTime stops it.
func TestEvalTimeLimit(t *testing.T) {
	env := newEnv(t)
	src := "lists.range(140000).all(i, i >= 0)"
	p, err := env.CompileCondition(src)
	if err != nil {
		t.Fatalf("CompileCondition: %v", err)
	}
	start := time.Now()
	got, err := p.EvalBool(context.Background(), nil)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("EvalBool = %v after %s, want the time limit's error", got, took)
	}
	want := "evaluating " + strconv.Quote(src) + ": operation cancelled: took longer than 1s, the most one evaluation may take"
	if err.Error() != want {
		t.Errorf("EvalBool error\n%q\nwant\n%q", err.Error(), want)
	}
	if took > MaxEvalTime+2*time.Second {
		t.Errorf("EvalBool took %s, want about %s", took, MaxEvalTime)
	}

	// A caller's own cancellation is not reported as the time limit.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.EvalBool(ctx, nil); err == nil || strings.Contains(err.Error(), "took longer") {
		t.Errorf("EvalBool with a cancelled context: %v, want a cancellation that names no time limit", err)
	}
}

func TestEvalJSON(t *testing.T) {
	env := newEnv(t)
	tests := []struct {
		src  string
		want string // compact JSON
	}{
		{"object.metadata.labels", `{"app.kubernetes.io/name":"pg","tier":"prod"}`},
		{"{'b': 1, 'a': [true, null, 'x'], 'c': {'z': 1, 'y': 2.5}}", `{"a":[true,null,"x"],"b":1,"c":{"y":2.5,"z":1}}`},
		{"object.spec.ports.map(p, p.port)", `[5432,9187]`},
		{"[]", `[]`},
		{"{}", `{}`},
		{"'he said \"hi\"'", `"he said \"hi\""`},
		{"object.metadata.name + '-' + object.metadata.namespace", `"db-prod"`},
		{"42", `42`},
		{"-7", `-7`},
		{"2.5", `2.5`},
		{"2.0", `2`},
		{"object.spec.replicas", `3`},
		{"1u", `1`},
		{"true", `true`},
		{"null", `null`},
		{"steps.drain.outputs", `{"count":2}`},
	}
	for _, tt := range tests {
		p, err := env.CompileValue(tt.src)
		if err != nil {
			t.Errorf("CompileValue(%q): %v", tt.src, err)
			continue
		}
		got, err := p.EvalJSON(context.Background(), testVars())
		if err != nil {
			t.Errorf("EvalJSON(%q): %v", tt.src, err)
			continue
		}
		if !json.Valid(got) {
			t.Errorf("EvalJSON(%q) = %s: not valid JSON", tt.src, got)
			continue
		}
		// protojson may insert whitespace; compare the compact form.
		var buf bytes.Buffer
		if err := json.Compact(&buf, got); err != nil {
			t.Fatalf("compacting %s: %v", got, err)
		}
		if buf.String() != tt.want {
			t.Errorf("EvalJSON(%q) = %s, want %s", tt.src, buf.String(), tt.want)
		}
	}
}

func TestEvalJSONErrors(t *testing.T) {
	env := newEnv(t)
	tests := []struct {
		src     string
		wantErr string
	}{
		{"{1: 2}", `evaluating "{1: 2}": value of type map cannot be represented as JSON: unsupported type conversion from 'int' to string`},
		{"object.nope", `evaluating "object.nope": no such key: nope`},
	}
	for _, tt := range tests {
		p, err := env.CompileValue(tt.src)
		if err != nil {
			t.Errorf("CompileValue(%q): %v", tt.src, err)
			continue
		}
		got, err := p.EvalJSON(context.Background(), testVars())
		if err == nil {
			t.Errorf("EvalJSON(%q) = %s, want error %q", tt.src, got, tt.wantErr)
			continue
		}
		if got != nil {
			t.Errorf("EvalJSON(%q) returned %s with an error", tt.src, got)
		}
		if err.Error() != tt.wantErr {
			t.Errorf("EvalJSON(%q) error\n%q\nwant\n%q", tt.src, err.Error(), tt.wantErr)
		}
	}
}

func TestExtend(t *testing.T) {
	base := newEnv(t)
	env, err := base.Extend([]string{"pods", "services"}, []string{"response"})
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	vars := testVars()
	vars["pods"] = []any{
		map[string]any{"metadata": map[string]any{"name": "db-0"}},
		map[string]any{"metadata": map[string]any{"name": "db-1"}},
	}
	vars["services"] = []any{}
	vars["response"] = map[string]any{"status": int64(200)}
	tests := []struct {
		src  string
		want bool
	}{
		{"size(pods) == 2", true},
		{"pods.all(p, p.metadata.name.startsWith(object.metadata.name))", true},
		{"pods.exists(p, p.metadata.name == 'db-2')", false},
		{"size(services) == 0", true},
		{"services.all(s, false)", true},
		{"response.status == 200", true},
		{"object.metadata.name == 'db'", true},
	}
	for _, tt := range tests {
		p, err := env.CompileCondition(tt.src)
		if err != nil {
			t.Errorf("CompileCondition(%q): %v", tt.src, err)
			continue
		}
		got, err := p.EvalBool(context.Background(), vars)
		if err != nil {
			t.Errorf("EvalBool(%q): %v", tt.src, err)
			continue
		}
		if got != tt.want {
			t.Errorf("EvalBool(%q) = %v, want %v", tt.src, got, tt.want)
		}
	}

	// Lookups are typed as lists: comparing one to an int is a compile error.
	if _, err := env.CompileCondition("pods == 1"); err == nil {
		t.Errorf("CompileCondition(%q): no error, want a type error", "pods == 1")
	} else if want := "found no matching overload for '_==_' applied to '(list(dyn), int)'"; !strings.Contains(err.Error(), want) {
		t.Errorf("CompileCondition(%q) error %q, want it to contain %q", "pods == 1", err.Error(), want)
	}

	// The base environment is left as it was.
	if _, err := base.CompileCondition("size(pods) == 0"); err == nil {
		t.Errorf("base environment knows pods after Extend")
	}
}

func TestExtendReserved(t *testing.T) {
	env := newEnv(t).Reserve("response", "job")
	for _, name := range []string{"object", "steps", "run", "response", "job", "now"} {
		got, err := env.Extend([]string{"pods", name}, nil)
		if err == nil {
			t.Errorf("Extend(%q): no error", name)
			continue
		}
		if got != nil {
			t.Errorf("Extend(%q) returned an environment with an error", name)
		}
		if want := `variable name "` + name + `" is reserved`; err.Error() != want {
			t.Errorf("Extend(%q) error %q, want %q", name, err.Error(), want)
		}
	}
}
