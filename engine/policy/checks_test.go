package policy_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
	"github.com/teardown-dev/teardown-operator/steps/jobstep"
	"github.com/teardown-dev/teardown-operator/steps/wait"
)

// discovery is a scripted cluster: which kinds it serves, and whether each is namespaced.
var discovery = map[schema.GroupVersionKind]bool{
	{Version: "v1", Kind: "ConfigMap"}: true,
	{Version: "v1", Kind: "Pod"}:       true,
	{Version: "v1", Kind: "Node"}:      false,
	{Version: "v1", Kind: "Namespace"}: false,
}

func scope(gvk schema.GroupVersionKind) (bool, error) {
	namespaced, ok := discovery[gvk]
	if !ok {
		return false, fmt.Errorf("kind %s is not served", gvk)
	}
	return namespaced, nil
}

func fullCompiler(t *testing.T) *policy.Compiler {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	kinds := steps.Registry{
		wait.New(nil),
		httpstep.New(nil, nil, httpstep.Options{}),
		jobstep.New(nil, nil, nil, nil, jobstep.Options{}),
	}
	return policy.NewCompiler(env, kinds, scope)
}

func httpStep(name string, outputs map[string]string, success string) v1alpha1.Step {
	h := &v1alpha1.HTTPStep{URL: "https://api.example.com/x", SuccessCondition: success}
	if outputs != nil {
		h.Outputs = map[string]v1alpha1.Expression{}
		for k, v := range outputs {
			h.Outputs[k] = v1alpha1.Expression(v)
		}
	}
	return v1alpha1.Step{Name: name, HTTP: h}
}

func jobStep(name, namespace, success string) v1alpha1.Step {
	spec := `{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"busybox"}]}}}`
	return v1alpha1.Step{Name: name, Job: &v1alpha1.JobStep{Namespace: namespace, SuccessCondition: success,
		Template: v1alpha1.JobTemplate{Spec: runtime.RawExtension{Raw: []byte(spec)}}}}
}

func waitUntil(name, until string, lookups ...v1alpha1.Lookup) v1alpha1.Step {
	return v1alpha1.Step{Name: name, Wait: &v1alpha1.WaitStep{Until: until, Lookups: lookups}}
}

func compileView(t *testing.T, v policy.View) string {
	t.Helper()
	_, errs := fullCompiler(t).Compile(v)
	if len(errs) == 0 {
		return ""
	}
	return errs.ToAggregate().Error()
}

func namespaced(kind string, s ...v1alpha1.Step) policy.View {
	p := &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: v1alpha1.TeardownPolicySpec{
		TargetRef: v1alpha1.TargetReference{APIVersion: "v1", Kind: kind}, Pipeline: v1alpha1.Pipeline{Steps: s}}}
	v, _ := policy.ViewOf(p)
	return v
}

func cluster(kind string, s ...v1alpha1.Step) policy.View {
	p := &v1alpha1.ClusterTeardownPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.ClusterTeardownPolicySpec{
		TeardownPolicySpec: v1alpha1.TeardownPolicySpec{TargetRef: v1alpha1.TargetReference{APIVersion: "v1", Kind: kind},
			Pipeline: v1alpha1.Pipeline{Steps: s}}}}
	v, _ := policy.ViewOf(p)
	return v
}

// compileCheck is a policy and what compiling it says.
type compileCheck struct {
	name string
	view policy.View
	want []string // substrings of the error; none means the policy compiles
}

// compileChecks are mistakes that can be known from the policy and discovery, and look-alikes
// that are no mistake (the seeds of FuzzCompilePolicy too).
func compileChecks() []compileCheck {
	snap := httpStep("snap", map[string]string{"id": "response.body.id"}, "response.status == 200")
	return []compileCheck{
		{"response.status compared with a string", namespaced("ConfigMap", httpStep("a", nil, "response.status == 'ok'")),
			[]string{"spec.steps[0].http.successCondition", "no matching overload"}},
		{"response.status compared with an int", namespaced("ConfigMap", httpStep("a", nil, "response.status == 200 && response.headers['etag'] != ''")), nil},
		{"response field misspelt", namespaced("ConfigMap", httpStep("a", map[string]string{"x": "response.stauts"}, "")),
			[]string{"spec.steps[0].http.outputs[x]", "undefined field 'stauts'"}},
		{"response body is dynamic", namespaced("ConfigMap", httpStep("a", map[string]string{"x": "response.body.items[0].id"}, "")), nil},
		{"job field misspelt", namespaced("ConfigMap", jobStep("j", "", "job.status.succeded > 0")),
			[]string{"spec.steps[0].job.successCondition", "undefined field 'succeded'"}},
		{"job field typed", namespaced("ConfigMap", jobStep("j", "", "job.status.succeeded == 'yes'")),
			[]string{"spec.steps[0].job.successCondition", "no matching overload"}},
		{"job condition valid", namespaced("ConfigMap", jobStep("j", "", "job.status.succeeded > 0 && job.metadata.namespace != '' && job.status.conditions.exists(c, c.type == 'Complete')")), nil},
		{"output of a step that does not exist", namespaced("ConfigMap", snap, httpStep("b", nil, "steps.nosuch.outputs.x == 1")),
			[]string{"spec.steps[1].http.successCondition", `the policy has no step "nosuch" (earlier steps: snap)`}},
		{"output of a later step", namespaced("ConfigMap", waitUntil("w", "steps.snap.outputs.id != ''"), snap),
			[]string{"spec.steps[0].wait.until", "steps.snap runs after this step"}},
		{"own step in when", namespaced("ConfigMap", v1alpha1.Step{Name: "w", When: "steps.w.phase == 'Failed'", Wait: &v1alpha1.WaitStep{Duration: &metav1.Duration{}}}),
			[]string{"spec.steps[0].when", "steps.w is this step's own result"}},
		{"undeclared output key", namespaced("ConfigMap", snap, httpStep("b", nil, "steps.snap.outputs['idd'] == 1")),
			[]string{"spec.steps[1].http.successCondition", `http step snap has no output "idd" (it has: id)`}},
		{"wait steps have no outputs", namespaced("ConfigMap", waitUntil("w", "true"), httpStep("b", nil, "has(steps.w.outputs.x)")),
			[]string{"wait step w has no outputs"}},
		{"job outputs are known", namespaced("ConfigMap", jobStep("dump", "", ""), httpStep("b", nil, "steps.dump.outputs.jobName != ''")), nil},
		{"step entry field misspelt", namespaced("ConfigMap", snap, httpStep("b", nil, "steps.snap.phse == 'Succeeded'")),
			[]string{`steps.snap.phse: a step has no field "phse" (it has: phase, message, outputs)`}},
		{"hyphenated step by index", namespaced("ConfigMap", httpStep("export-db", map[string]string{"id": "response.body"}, ""),
			httpStep("b", nil, "steps['export-db'].outputs.id != ''")), nil},
		{"interpolated string reads a later step", namespaced("ConfigMap", v1alpha1.Step{Name: "a", HTTP: &v1alpha1.HTTPStep{URL: "https://x.example/${steps.b.outputs.id}"}}, snap),
			[]string{"spec.steps[0].http.url", "steps.b: the policy has no step"}},
		{"run field misspelt", namespaced("ConfigMap", v1alpha1.Step{Name: "w", When: "run.atempt > 1", Wait: &v1alpha1.WaitStep{Duration: &metav1.Duration{}}}),
			[]string{"spec.steps[0].when", `run.atempt: run has no field "atempt"`}},
		{"lookup of a cluster-scoped kind", namespaced("ConfigMap", waitUntil("w", "size(nodes) == 0", v1alpha1.Lookup{Name: "nodes", APIVersion: "v1", Kind: "Node"})),
			[]string{"spec.steps[0].wait.lookups[0].kind: Forbidden: Node is cluster-scoped"}},
		{"lookup named like a kind's variable", namespaced("ConfigMap", waitUntil("w", "size(response) == 0", v1alpha1.Lookup{Name: "response", APIVersion: "v1", Kind: "Pod"})),
			[]string{`spec.steps[0].wait.lookups[0].name: Invalid value: "response": is a built-in variable name`}},
		{"lookup of a namespaced kind", namespaced("ConfigMap", waitUntil("w", "size(pods) == 0", v1alpha1.Lookup{Name: "pods", APIVersion: "v1", Kind: "Pod"})), nil},
		{"lookup of a kind not served yet", namespaced("ConfigMap", waitUntil("w", "size(xs) == 0", v1alpha1.Lookup{Name: "xs", APIVersion: "example.com/v1", Kind: "Widget"})), nil},
		{"cluster policy may look up nodes", cluster("ConfigMap", waitUntil("w", "size(nodes) == 0", v1alpha1.Lookup{Name: "nodes", APIVersion: "v1", Kind: "Node"})), nil},
		{"job for a cluster-scoped target without namespace", cluster("Namespace", jobStep("j", "", "")),
			[]string{"spec.steps[0].job.namespace: Required value: Namespace is cluster-scoped"}},
		{"job for a cluster-scoped target with namespace", cluster("Namespace", jobStep("j", "teardown-jobs", "")), nil},
		{"job for a namespaced target without namespace", cluster("ConfigMap", jobStep("j", "", "")), nil},
	}
}

// Mistakes that can be known from the policy and discovery are refused at compile, naming the
// field, rather than failing every teardown.
func TestCompileCatchesBeforeDeletion(t *testing.T) {
	for _, tt := range compileChecks() {
		t.Run(tt.name, func(t *testing.T) {
			got := compileView(t, tt.view)
			if len(tt.want) == 0 {
				if got != "" {
					t.Fatalf("Compile: %s, want no error", got)
				}
				return
			}
			if got == "" {
				t.Fatalf("Compile succeeded, want an error with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("error %q does not contain %q", got, w)
				}
			}
		})
	}
}

// match is evaluated before any step runs.
func TestMatchCannotReadSteps(t *testing.T) {
	v := namespaced("ConfigMap", waitUntil("w", "true"))
	v.Spec.Match = "steps.w.phase == 'Succeeded'"
	got := compileView(t, v)
	if !strings.Contains(got, "spec.match") || !strings.Contains(got, "match is evaluated before any step runs") {
		t.Errorf("error = %q", got)
	}
}

// A run's pipeline was valid when its policy compiled: checks added since must not fail the run.
func TestRunPipelineCompiledLeniently(t *testing.T) {
	c := fullCompiler(t)
	run := &v1alpha1.TeardownRun{Spec: v1alpha1.TeardownRunSpec{
		PolicyRef: v1alpha1.PolicyReference{Kind: policy.KindCluster, Name: "p", UID: "u", Generation: 1},
		Target:    v1alpha1.TargetObjectReference{APIVersion: "v1", Kind: "Namespace", Name: "n"},
		Pipeline: v1alpha1.Pipeline{Steps: []v1alpha1.Step{
			httpStep("a", nil, "response.status == 200.0 && steps.b.phase == 'Pending'"),
			jobStep("b", "", "job.status.succeded > 0"),
		}},
	}}
	if _, err := c.PipelineForRun(run); err != nil {
		t.Fatalf("PipelineForRun: %v", err)
	}
	run.Spec.PolicyRef.Generation = 2
	run.Spec.Pipeline.Steps[0].When = "(" // still refused: it never compiled
	if _, err := c.PipelineForRun(run); err == nil || !strings.Contains(err.Error(), "spec.pipeline.steps[0].when") {
		t.Errorf("a syntax error: %v", err)
	}
}
