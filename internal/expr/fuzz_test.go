package expr

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
)

// maxEvalTime bounds the wall time of one evaluation in the fuzz targets. The cost limit is meant
// to stop an expression long before: an evaluation that takes longer ran past it.
const maxEvalTime = 2 * time.Second

// fuzzEnv is the environment of the fuzz targets: everything a policy's expressions can see (the
// base variables, typed response and job, two lookups) with steps scoped as for a step that runs
// after drain and snap.
func fuzzEnv(f *testing.F) *Env {
	f.Helper()
	base, err := NewEnv()
	if err != nil {
		f.Fatal(err)
	}
	response := ObjectType("teardown.HTTPResponse", map[string]Type{"status": Int, "headers": MapOf(String), "body": Dyn})
	env, err := base.Reserve("response", "job").Declare(Var{"response", response}, Var{"job", TypeOf(reflect.TypeFor[batchv1.Job](), "batch.v1.Job")})
	if err != nil {
		f.Fatal(err)
	}
	if env, err = env.Extend([]string{"items", "pods"}, nil); err != nil {
		f.Fatal(err)
	}
	return env.WithSteps(StepScope{
		Before: []StepInfo{{Name: "drain", Kind: "http", Outputs: []string{"count"}}, {Name: "snap", Kind: "http", Outputs: []string{"id"}}},
		After:  []string{"me", "later"},
	})
}

// fuzzVars binds every variable of fuzzEnv; items is the largest value, 100 numbers.
func fuzzVars() Vars {
	items := make([]any, 100)
	for i := range items {
		items[i] = int64(i)
	}
	return testVars().
		With("items", items).
		With("pods", []any{
			map[string]any{"metadata": map[string]any{"name": "db-0"}},
			map[string]any{"metadata": map[string]any{"name": "db-1"}},
		}).
		With("response", map[string]any{"status": int64(200), "headers": map[string]any{"etag": "x"}, "body": map[string]any{"id": "s-1"}}).
		With("job", map[string]any{"metadata": map[string]any{"name": "j"},
			"status": map[string]any{"succeeded": int64(1), "conditions": []any{map[string]any{"type": "Complete", "status": "True"}}}})
}

// bounded runs eval and fails the test when it takes longer than maxEvalTime. A runaway
// evaluation is left behind: the fuzzer stops at the failure.
func bounded(t *testing.T, what string, eval func()) {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		eval()
	}()
	select {
	case <-done:
		if d := time.Since(start); d > maxEvalTime {
			t.Fatalf("%s took %s, more than %s: the cost limit (%d) did not bound it", what, d, maxEvalTime, CostLimit)
		}
	case <-time.After(maxEvalTime):
		t.Fatalf("%s still running after %s: the cost limit (%d) did not bound it", what, maxEvalTime, CostLimit)
	}
}

// exprSeeds are the expressions of the unit tables (expr_test.go, types_test.go).
var exprSeeds = []string{
	// TestConditionEval
	"object.metadata.name == 'db'",
	"object.metadata.namespace != 'prod'",
	"object.metadata.labels['tier'] == 'prod'",
	"object.metadata.labels['app.kubernetes.io/name'] == 'pg'",
	"'tier' in object.metadata.labels",
	"has(object.metadata.labels.tier)",
	"has(object.metadata.annotations)",
	"has(object.status)",
	"object.spec.replicas > 2",
	"object.spec.ports[0].port == 5432",
	"object.spec.ports.exists(p, p.port == 80)",
	"object.spec.ports.all(p, p.port > 1024)",
	"object.spec.ports.map(p, p.name) == ['pg', 'metrics']",
	"size(object.spec.ports) == 2",
	"object.?metadata.?annotations.orValue({}).size() == 0",
	"object.metadata.name.upperAscii() == 'DB'",
	"steps.drain.phase == 'Succeeded'",
	"steps.drain.outputs.count == 2",
	"'cleanup' in steps",
	"run.attempt > 1 && run.name.startsWith('db-')",
	"true",
	// TestCompileErrors, TestCompileConditionAcceptsDyn
	"",
	" \t\n",
	"1 + 1",
	"'yes'",
	"[1, 2].map(x, x)",
	"run",
	"foo == 1",
	"object.metadata.",
	"object",
	"null",
	"1u",
	"-7",
	"2.5",
	// TestEvalBoolErrors
	"object.metadata.missing == 'x'",
	"object.spec.ports[5].port == 1",
	"object.spec.replicas",
	// TestCostLimit
	"[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, " +
		"[1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5,6,7,8,9,10].map(e, [1,2,3,4,5,6,7,8,9,10].map(f, f)))))).size() > 0",
	"lists.range(1000).map(a, lists.range(1000).map(b, a + b)).size() > 0",
	"items.map(a, items.map(b, a + b)).size() > 0",
	// TestEvalJSON, TestEvalJSONErrors
	"{'b': 1, 'a': [true, null, 'x'], 'c': {'z': 1, 'y': 2.5}}",
	"'he said \"hi\"'",
	"object.metadata.name + '-' + object.metadata.namespace",
	"steps.drain.outputs",
	"{1: 2}",
	// TestExtend
	"pods.all(p, p.metadata.name.startsWith(object.metadata.name))",
	"services.all(s, false)",
	"pods == 1",
	// TestDeclaredTypes
	"response.status == 200 && response.headers['etag'] == 'x' && response.body.id == 's-1'",
	"response.status == 'ok'",
	"response.stauts == 200",
	"has(response.body.id) && !has(response.body.missing)",
	"job.status.succeeded > 0 && job.status.conditions.exists(c, c.type == 'Complete')",
	"job.metadata.creationTimestamp.startsWith('2026')",
	"job.?status.?succeeded.orValue(0) >= 1 && job.?status.?failed.orValue(0) == 0",
	"!has(job.spec) || job.spec.template.spec.containers.all(c, c.image != '')",
	"job.spec.parallelism == 'one'",
	"run.atempt > 0",
	// TestStepScopeForms
	"steps['export-db'].outputs.jobName != ''",
	"steps.?snap.?outputs.?id.orValue('') != ''",
	"steps[?'snap'].hasValue()",
	"steps['later'].phase == 'x'",
	"steps.me.phase == 'x'",
	"steps.snap.outputs['idd'] == ''",
	"steps['snap']['phse'] == ''",
	"run['name'] != '' && run.attempt > 0",
	"[{'foo': 1}].exists(steps, steps.foo == 1)",
	"[{'x': 1}].all(run, run.x == 1)",
}

// FuzzExpr compiles an arbitrary expression, as a value and as a condition, and evaluates what
// compiles. Neither may panic, and an evaluation must end within the cost limit.
func FuzzExpr(f *testing.F) {
	for _, s := range exprSeeds {
		f.Add(s)
	}
	env := fuzzEnv(f)
	f.Fuzz(func(t *testing.T, src string) {
		ctx := context.Background()
		if p, err := env.CompileValue(src); err == nil {
			if p.String() != src {
				t.Errorf("String() = %q, want %q", p.String(), src)
			}
			bounded(t, "evaluating "+src, func() {
				if v, err := p.Eval(ctx, fuzzVars()); err == nil {
					_, _ = ToJSON(v)
					_, _ = toText(v)
				}
			})
		} else if err.Error() == "" {
			t.Errorf("CompileValue(%q): an empty error", src)
		}
		if p, err := env.CompileCondition(src); err == nil {
			bounded(t, "evaluating "+src, func() { _, _ = p.EvalBool(ctx, fuzzVars()) })
		}
		// A run's pipeline is compiled untyped when it no longer compiles typed (see
		// policy.Compiler.PipelineForRun).
		if p, err := env.Untyped().CompileValue(src); err == nil {
			bounded(t, "evaluating "+src+" untyped", func() { _, _ = p.EvalJSON(ctx, fuzzVars()) })
		}
	})
}

// templateSeeds are the templates of the unit tables (template_test.go, tree_test.go).
var templateSeeds = []string{
	// TestTemplateRender
	"",
	"just text",
	"$ {a} $x }",
	"$${object.metadata.name}",
	"$${",
	"a $${b} c",
	"$${x}-${object.metadata.name}",
	"${object.metadata.name}",
	"${ object.metadata.name }",
	"app-${object.metadata.name}-x",
	"${object.metadata.name}.${object.metadata.namespace}",
	"a${1}b${'x'}c${true}",
	"${object.metadata.labels['app.kubernetes.io/name']}",
	"${ {'a': 1}['a'] }",
	"${ {'a': {'b': 'deep'}}['a']['b'] }",
	"${ '}' + \"x\" }",
	"${ \"{\" + '{' }!",
	`${ "a\"}" }`,
	`${ 'it\'s}' }`,
	"${ '''it's}''' }",
	`${ """say "}" ok""" }`,
	"${ '${x}' }",
	"${ 40 + 2 }",
	"${ 7u }",
	"${ 2.0 }",
	"${ object.spec.replicas }",
	"${ 1e21 }",
	"${ 1 < 2 }",
	"n=${ steps.drain.outputs.count }",
	"${run.name}/${run.attempt}",
	// TestTemplateRenderJSON, TestTemplateRawString
	"${ [1, 'a', true, null] }",
	"${ {'k': 'v', 'a': [1.5]} }",
	"${ object.metadata.labels }",
	"${ object.spec.ports.map(p, p.name) }",
	"${ [] }",
	`${ r'C:\' }`,
	// TestTemplateCompileErrors
	"a${1",
	"name-${",
	"${1}-${2",
	"${ {'a': 1}['a'] ",
	"${ 'abc }",
	`x${ "abc }`,
	"${ '''abc' }",
	`${ 'abc\`,
	"a${}b",
	"${  }",
	"${ nope }",
	"x-${1 +}",
	// TestTemplateRenderErrors
	"x-${ null }",
	"${ object.?metadata.?annotations.orValue(null) }",
	"${ object.nope }",
	"${object.metadata.name}-${object.metadata.labels.owner}",
	"${ {1: 2} }",
	// tree_test.go
	"echo ${HOME}",
	"busybox:${object.metadata.name",
	"dump-${object.metadata.name}",
}

// FuzzTemplate compiles an arbitrary ${...} template and renders what compiles. Neither may
// panic; a rendering must end within the cost limit and start with the template's literal prefix.
func FuzzTemplate(f *testing.F) {
	for _, s := range templateSeeds {
		f.Add(s)
	}
	env := fuzzEnv(f)
	f.Fuzz(func(t *testing.T, src string) {
		tp, err := env.CompileTemplate(src)
		if err != nil {
			if tp != nil {
				t.Errorf("CompileTemplate(%q) returned a template with an error", src)
			}
			return
		}
		if tp.String() != src {
			t.Errorf("String() = %q, want %q", tp.String(), src)
		}
		prefix := tp.LiteralPrefix()
		if tp.Literal() {
			// No expression: the rendering is known without variables, and is all prefix.
			got, err := tp.Render(context.Background(), nil)
			if err != nil || got != prefix {
				t.Errorf("literal template %q renders %q, %v; want its prefix %q", src, got, err, prefix)
			}
			return
		}
		var got string
		bounded(t, "rendering "+src, func() { got, err = tp.Render(context.Background(), fuzzVars()) })
		if err == nil && !strings.HasPrefix(got, prefix) {
			t.Errorf("Render(%q) = %q, does not start with the literal prefix %q", src, got, prefix)
		}
	})
}
