package expr

import (
	"context"
	"reflect"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
)

func TestDeclaredTypes(t *testing.T) {
	base := newEnv(t)
	response := ObjectType("test.Response", map[string]Type{"status": Int, "headers": MapOf(String), "body": Dyn})
	env, err := base.Declare(Var{"response", response}, Var{"job", TypeOf(reflect.TypeFor[batchv1.Job](), "batch.v1.Job")})
	if err != nil {
		t.Fatal(err)
	}
	vars := Vars{
		"response": map[string]any{"status": int64(200), "headers": map[string]any{"etag": "x"}, "body": map[string]any{"id": "s-1"}},
		"job": map[string]any{"metadata": map[string]any{"name": "j", "creationTimestamp": "2026-01-01T00:00:00Z"},
			"status": map[string]any{"succeeded": int64(1), "conditions": []any{map[string]any{"type": "Complete", "status": "True"}}}},
	}
	tests := []struct {
		src     string
		want    bool
		wantErr string // a compile error
	}{
		{src: "response.status == 200 && response.headers['etag'] == 'x' && response.body.id == 's-1'", want: true},
		{src: "response.status == 'ok'", wantErr: "no matching overload"},
		{src: "response.stauts == 200", wantErr: "undefined field 'stauts'"},
		{src: "response.headers['etag'] > 1", wantErr: "no matching overload"},
		{src: "has(response.body.id) && !has(response.body.missing)", want: true},
		{src: "job.status.succeeded > 0 && job.status.conditions.exists(c, c.type == 'Complete')", want: true},
		{src: "job.metadata.creationTimestamp.startsWith('2026')", want: true},
		{src: "job.metadata.name == 'j' && !has(job.metadata.namespace)", want: true},
		{src: "job.status.succeded > 0", wantErr: "undefined field 'succeded'"},
		{src: "job.?status.?succeeded.orValue(0) >= 1 && job.?status.?failed.orValue(0) == 0", want: true},
		{src: "!has(job.spec) || job.spec.template.spec.containers.all(c, c.image != '')", want: true},
		{src: "job.spec.parallelism == 'one'", wantErr: "no matching overload"},
		{src: "run.attempt > 0 && run.name != ''", wantErr: ""}, // run is declared by NewEnv
		{src: "run.atempt > 0", wantErr: "run has no field \"atempt\""},
	}
	vars["run"] = map[string]any{"attempt": int64(1), "name": "r"}
	for _, tt := range tests {
		p, err := env.CompileCondition(tt.src)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("CompileCondition(%q) = %v, want an error with %q", tt.src, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("CompileCondition(%q): %v", tt.src, err)
			continue
		}
		if strings.HasPrefix(tt.src, "run.") {
			continue
		}
		got, err := p.EvalBool(context.Background(), vars)
		if err != nil || got != tt.want {
			t.Errorf("EvalBool(%q) = %v, %v; want %v", tt.src, got, err, tt.want)
		}
	}
}

func TestStepScopeForms(t *testing.T) {
	env := newEnv(t).WithSteps(StepScope{
		Before: []StepInfo{{Name: "snap", Kind: "http", Outputs: []string{"id"}}, {Name: "export-db", Kind: "job", Outputs: []string{"jobName"}}},
		After:  []string{"me", "later"},
	})
	tests := []struct{ src, wantErr string }{
		{"steps.snap.outputs.id != ''", ""},
		{"steps['export-db'].outputs.jobName != ''", ""},
		{"steps.?snap.?outputs.?id.orValue('') != ''", ""},
		{"steps[?'snap'].hasValue()", ""},
		{"has(steps.snap) && steps.snap.phase == 'Succeeded'", ""},
		{"size(steps) > 0", ""},
		{"has(steps.nope)", `the policy has no step "nope" (earlier steps: snap, export-db)`},
		{"steps.?nope.hasValue()", `the policy has no step "nope"`},
		{"steps['later'].phase == 'x'", "steps.later runs after this step"},
		{"steps.me.phase == 'x'", "this step's own result"},
		{"steps.snap.outputs['idd'] == ''", `http step snap has no output "idd" (it has: id)`},
		{"steps.snap.outputs.?idd.orValue('') == ''", `has no output "idd"`},
		{"steps['export-db']['outputs']['jobName'] != ''", ""},
		{"steps['snap']['phse'] == ''", `a step has no field "phse"`},
		{"run['name'] != '' && run.attempt > 0", ""},
		{"run['atempt'] > 0", `run has no field "atempt"`},
		// A comprehension's own variable named steps or run is the user's, not the built-in.
		{"[{'foo': 1}].exists(steps, steps.foo == 1)", ""},
		{"[{'x': 1}].all(run, run.x == 1)", ""},
	}
	for _, tt := range tests {
		_, err := env.CompileCondition(tt.src)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tt.src, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: error %v, want %q", tt.src, err, tt.wantErr)
		}
	}
	if _, err := newEnv(t).WithSteps(StepScope{Match: true}).CompileCondition("[{'name': 'x'}].exists(run, run.name == 'x')"); err != nil {
		t.Errorf("match with a comprehension variable named run: %v", err)
	}
	if _, err := newEnv(t).WithSteps(StepScope{Match: true}).CompileCondition("run.name != ''"); err == nil ||
		!strings.Contains(err.Error(), "match is evaluated before any run exists") {
		t.Errorf("match reading run: %v", err)
	}
	if _, err := newEnv(t).WithSteps(StepScope{Match: true}).CompileCondition("steps.a.phase == ''"); err == nil ||
		!strings.Contains(err.Error(), "match is evaluated before any step runs") {
		t.Errorf("match scope: %v", err)
	}
}
