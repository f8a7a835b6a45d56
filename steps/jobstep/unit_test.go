package jobstep

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/steps"
)

// ---------------------------------------------------------------------------------------------
// Fixtures

const (
	stepName  = "dump"
	policyNS  = "shop"
	runNS     = "shop"
	targetNS  = "prod"
	runName   = "db-x1"
	runUID    = types.UID("run-uid-1")
	targetUID = types.UID("target-uid-1")
)

// validSpec is a small JobSpec that compiles.
const validSpec = `{"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`

var stepPath = field.NewPath("spec", "steps").Index(0)

func newTestEnv(t *testing.T) *expr.Env {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatalf("NewEnv: %v", err)
	}
	return env
}

func compileCtx(t *testing.T, namespaced bool) steps.CompileContext {
	cc := steps.CompileContext{Env: newTestEnv(t), Namespaced: namespaced}
	if namespaced {
		cc.Namespace = policyNS
	}
	return cc
}

// jobStep returns the step "dump" with spec as its template's raw JobSpec (nil when empty).
func jobStep(job v1alpha1.JobStep, spec string) *v1alpha1.Step {
	if spec != "" {
		job.Template.Spec = runtime.RawExtension{Raw: []byte(spec)}
	}
	return &v1alpha1.Step{Name: stepName, Job: &job}
}

// compileAction compiles a step that must be valid.
func compileAction(t *testing.T, namespaced bool, job v1alpha1.JobStep, spec string) *action {
	t.Helper()
	act, errs := New(nil, nil, nil, nil, Options{}).Compile(compileCtx(t, namespaced), jobStep(job, spec), stepPath)
	if len(errs) > 0 {
		t.Fatalf("Compile: %v", errs)
	}
	a, ok := act.(*action)
	if !ok {
		t.Fatalf("Compile returned %T, want *action", act)
	}
	return a
}

func testRun(targetNamespace string) *v1alpha1.TeardownRun {
	return &v1alpha1.TeardownRun{
		ObjectMeta: metav1.ObjectMeta{
			Name:      runName,
			Namespace: runNS,
			UID:       runUID,
			Labels:    map[string]string{"teardown.dev/policy": "x", "other": "y"},
		},
		Spec: v1alpha1.TeardownRunSpec{
			Target: v1alpha1.TargetObjectReference{
				APIVersion: "v1", Kind: "ConfigMap", Namespace: targetNamespace, Name: "db", UID: targetUID,
			},
		},
	}
}

func testVars(targetNamespace string) expr.Vars {
	return expr.Vars{
		expr.VarObject: map[string]any{
			"metadata": map[string]any{"name": "db", "namespace": targetNamespace, "labels": map[string]any{"tier": "gold"}},
			"spec":     map[string]any{"memory": "64Mi", "size": "lots", "bad": "Not_A_Label"},
		},
		expr.VarSteps: map[string]any{},
		expr.VarRun:   map[string]any{},
	}
}

// testInput is the input of attempt 2 of step "dump", 90 seconds before its deadline. An empty
// policyNamespace means a ClusterTeardownPolicy.
func testInput(policyNamespace, targetNamespace string) *steps.Input {
	now := time.Now()
	return &steps.Input{
		Run: testRun(targetNamespace),
		Status: &v1alpha1.StepStatus{
			Name:     stepName,
			Attempts: 2,
			Deadline: &metav1.MicroTime{Time: now.Add(90 * time.Second)},
		},
		Vars:            testVars(targetNamespace),
		PolicyNamespace: policyNamespace,
		Now:             now,
	}
}

func envNames(env []corev1.EnvVar) []string {
	out := make([]string, len(env))
	for i, e := range env {
		out[i] = e.Name
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// Compile

func TestCompileErrors(t *testing.T) {
	const (
		jobPath  = "spec.steps[0].job"
		specPath = jobPath + ".template.spec"
		podPath  = specPath + ".template.spec"
	)
	type wantErr struct {
		field  string
		typ    field.ErrorType
		phrase string
	}
	tests := []struct {
		name       string
		namespaced bool
		job        v1alpha1.JobStep
		spec       string
		want       []wantErr
	}{
		{
			name: "missing template.spec",
			want: []wantErr{{specPath, field.ErrorTypeRequired, "at least template.spec.containers"}},
		},
		{
			name: "spec is an array",
			spec: `[1, 2]`,
			want: []wantErr{{specPath, field.ErrorTypeInvalid, "must be an object"}},
		},
		{
			name: "spec is a string",
			spec: `"job"`,
			want: []wantErr{{specPath, field.ErrorTypeInvalid, "must be an object"}},
		},
		{
			name: "spec is not JSON",
			spec: `{"template":`,
			want: []wantErr{{specPath, field.ErrorTypeInvalid, "unexpected end of JSON input"}},
		},
		{
			name: "unknown field",
			spec: `{"parallelizm": 2, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
			want: []wantErr{{specPath, field.ErrorTypeInvalid, `unknown field "parallelizm"`}},
		},
		{
			name: "unknown field deep in a container",
			spec: `{"template": {"spec": {"containers": [{"name": "c", "image": "busybox", "imagePullPolicyy": "Always"}]}}}`,
			want: []wantErr{{specPath, field.ErrorTypeInvalid, `unknown field "template.spec.containers[0].imagePullPolicyy"`}},
		},
		{
			name: "interpolation in an integer field",
			spec: `{"backoffLimit": "${object.spec.memory}", "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
			want: []wantErr{{specPath, field.ErrorTypeInvalid, "cannot fill a number or boolean field"}},
		},
		{
			name: "literal string in a boolean field",
			spec: `{"suspend": "true", "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
			want: []wantErr{{specPath, field.ErrorTypeInvalid, "cannot unmarshal string"}},
		},
		{
			name: "selector set",
			spec: `{"selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
			want: []wantErr{{specPath + ".selector", field.ErrorTypeForbidden, "the Job controller chooses the selector"}},
		},
		{
			name: "manualSelector true",
			spec: `{"manualSelector": true, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
			want: []wantErr{{specPath + ".manualSelector", field.ErrorTypeForbidden, "the Job controller chooses the selector"}},
		},
		{
			name: "no containers",
			spec: `{"template": {"spec": {"containers": []}}}`,
			want: []wantErr{{podPath + ".containers", field.ErrorTypeRequired, "at least one container"}},
		},
		{
			name: "no pod template",
			spec: `{"backoffLimit": 1}`,
			want: []wantErr{{podPath + ".containers", field.ErrorTypeRequired, "at least one container"}},
		},
		{
			name: "restartPolicy Always",
			spec: `{"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "busybox"}]}}}`,
			want: []wantErr{{podPath + ".restartPolicy", field.ErrorTypeNotSupported, `supported values: "OnFailure", "Never"`}},
		},
		{
			name: "negative ttlSecondsAfterFinished",
			spec: `{"ttlSecondsAfterFinished": -1, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
			want: []wantErr{{specPath + ".ttlSecondsAfterFinished", field.ErrorTypeInvalid, "must not be negative"}},
		},
		{
			name:       "TeardownPolicy names another namespace",
			namespaced: true,
			job:        v1alpha1.JobStep{Namespace: "other"},
			spec:       validSpec,
			want:       []wantErr{{jobPath + ".namespace", field.ErrorTypeForbidden, `only in its own namespace "shop"`}},
		},
		{
			name:       "TeardownPolicy templates its namespace",
			namespaced: true,
			job:        v1alpha1.JobStep{Namespace: "${object.metadata.namespace}"},
			spec:       validSpec,
			want:       []wantErr{{jobPath + ".namespace", field.ErrorTypeForbidden, `only in its own namespace "shop"`}},
		},
		{
			name: "broken namespace template",
			job:  v1alpha1.JobStep{Namespace: "ns-${object"},
			spec: validSpec,
			want: []wantErr{{jobPath + ".namespace", field.ErrorTypeInvalid, "unterminated ${"}},
		},
		{
			name: "label with the teardown.dev/ prefix",
			job:  v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Metadata: v1alpha1.JobTemplateMetadata{Labels: map[string]string{"teardown.dev/run": "x"}}}},
			spec: validSpec,
			want: []wantErr{{jobPath + ".template.metadata.labels[teardown.dev/run]", field.ErrorTypeForbidden, "the teardown.dev/ prefix is the operator's"}},
		},
		{
			name: "label with a subdomain of teardown.dev",
			job:  v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Metadata: v1alpha1.JobTemplateMetadata{Labels: map[string]string{"something.teardown.dev/x": "y"}}}},
			spec: validSpec,
			want: []wantErr{{jobPath + ".template.metadata.labels[something.teardown.dev/x]", field.ErrorTypeForbidden, "the teardown.dev/ prefix is the operator's"}},
		},
		{
			name: "annotation with the teardown.dev/ prefix",
			job:  v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Metadata: v1alpha1.JobTemplateMetadata{Annotations: map[string]string{"teardown.dev/note": "x"}}}},
			spec: validSpec,
			want: []wantErr{{jobPath + ".template.metadata.annotations[teardown.dev/note]", field.ErrorTypeForbidden, "the teardown.dev/ prefix is the operator's"}},
		},
		{
			name: "invalid label key",
			job:  v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Metadata: v1alpha1.JobTemplateMetadata{Labels: map[string]string{"bad key!": "x"}}}},
			spec: validSpec,
			want: []wantErr{{jobPath + ".template.metadata.labels[bad key!]", field.ErrorTypeInvalid, "name part must consist of alphanumeric characters"}},
		},
		{
			name: "literal label value that is not a label value",
			job:  v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Metadata: v1alpha1.JobTemplateMetadata{Labels: map[string]string{"app": "two words"}}}},
			spec: validSpec,
			want: []wantErr{{jobPath + ".template.metadata.labels[app]", field.ErrorTypeInvalid, "a valid label must be"}},
		},
		{
			name: "broken label value template",
			job:  v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Metadata: v1alpha1.JobTemplateMetadata{Labels: map[string]string{"app": "${nope}"}}}},
			spec: validSpec,
			want: []wantErr{{jobPath + ".template.metadata.labels[app]", field.ErrorTypeInvalid, "undeclared reference to 'nope'"}},
		},
		{
			name: "successCondition does not parse",
			job:  v1alpha1.JobStep{SuccessCondition: "job.status.succeeded >="},
			spec: validSpec,
			want: []wantErr{{jobPath + ".successCondition", field.ErrorTypeInvalid, "Syntax error"}},
		},
		{
			name: "successCondition is not a bool",
			job:  v1alpha1.JobStep{SuccessCondition: "'yes'"},
			spec: validSpec,
			want: []wantErr{{jobPath + ".successCondition", field.ErrorTypeInvalid, "must evaluate to bool"}},
		},
		{
			name: "undeclared variable in a command",
			spec: `{"template": {"spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo ${HOME}"]}]}}}`,
			want: []wantErr{{podPath + ".containers[0].command[2]", field.ErrorTypeInvalid, "write $${ for a literal ${"}},
		},
		{
			name:       "several errors at once, in field order",
			namespaced: true,
			job: v1alpha1.JobStep{
				Namespace:        "other",
				Template:         v1alpha1.JobTemplate{Metadata: v1alpha1.JobTemplateMetadata{Labels: map[string]string{"teardown.dev/x": "y"}}},
				SuccessCondition: "nope",
			},
			spec: `{"selector": {}, "template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "${HOME}"}]}}}`,
			want: []wantErr{
				{jobPath + ".namespace", field.ErrorTypeForbidden, "own namespace"},
				{jobPath + ".template.metadata.labels[teardown.dev/x]", field.ErrorTypeForbidden, "prefix"},
				{podPath + ".containers[0].image", field.ErrorTypeInvalid, "undeclared reference to 'HOME'"},
				{specPath + ".selector", field.ErrorTypeForbidden, "selector"},
				{podPath + ".restartPolicy", field.ErrorTypeNotSupported, "Always"},
				{jobPath + ".successCondition", field.ErrorTypeInvalid, "undeclared reference to 'nope'"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			act, errs := New(nil, nil, nil, nil, Options{}).Compile(compileCtx(t, tt.namespaced), jobStep(tt.job, tt.spec), stepPath)
			if act != nil {
				t.Errorf("Compile returned an action (%T) with errors", act)
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("Compile gave %d errors, want %d:\n%v", len(errs), len(tt.want), errs)
			}
			for i, w := range tt.want {
				e := errs[i]
				if e.Field != w.field || e.Type != w.typ {
					t.Errorf("error %d at %s (%s), want %s (%s): %v", i, e.Field, e.Type, w.field, w.typ, e)
				}
				if !strings.Contains(e.Error(), w.phrase) {
					t.Errorf("error %d %q does not mention %q", i, e.Error(), w.phrase)
				}
			}
		})
	}
}

func TestCompileValid(t *testing.T) {
	tests := []struct {
		name          string
		namespaced    bool
		job           v1alpha1.JobStep
		spec          string
		wantTTL       int32
		wantNamespace bool // job.namespace compiled
		wantSuccess   bool // successCondition compiled
	}{
		{
			name:    "minimal",
			spec:    validSpec,
			wantTTL: 3600,
		},
		{
			name:          "ClusterTeardownPolicy with a templated namespace",
			job:           v1alpha1.JobStep{Namespace: "${object.metadata.namespace}-jobs"},
			spec:          validSpec,
			wantTTL:       3600,
			wantNamespace: true,
		},
		{
			name:          "TeardownPolicy naming its own namespace",
			namespaced:    true,
			job:           v1alpha1.JobStep{Namespace: policyNS},
			spec:          validSpec,
			wantTTL:       3600,
			wantNamespace: true,
		},
		{
			name: "quantity written as an interpolation",
			spec: `{"template": {"spec": {"containers": [{"name": "c", "image": "busybox",
				"resources": {"limits": {"memory": "${object.spec.memory}", "cpu": "100m"}}}]}}}`,
			wantTTL: 3600,
		},
		{
			name:    "escaped interpolation in a command",
			spec:    `{"template": {"spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo $${HOME}"]}]}}}`,
			wantTTL: 3600,
		},
		{
			name:    "ttlSecondsAfterFinished 0",
			spec:    `{"ttlSecondsAfterFinished": 0, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
			wantTTL: 0,
		},
		{
			name:    "ttlSecondsAfterFinished 600",
			spec:    `{"ttlSecondsAfterFinished": 600, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
			wantTTL: 600,
		},
		{
			name:    "manualSelector false, restartPolicy OnFailure",
			spec:    `{"manualSelector": false, "template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}`,
			wantTTL: 3600,
		},
		{
			name:    "templated restartPolicy and string fields",
			spec:    `{"template": {"spec": {"restartPolicy": "${'Never'}", "serviceAccountName": "${object.metadata.name}", "containers": [{"name": "c-${object.metadata.name}", "image": "busybox"}]}}}`,
			wantTTL: 3600,
		},
		{
			name: "labels and annotations, templated or literal; a look-alike domain is not ours",
			job: v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Metadata: v1alpha1.JobTemplateMetadata{
				Labels:      map[string]string{"app": "dump", "target": "${object.metadata.name}", "notteardown.dev/x": "y", "example.com/empty": ""},
				Annotations: map[string]string{"note": "any text, even with spaces: $${x}", "who": "${object.metadata.name}"},
			}}},
			spec:    validSpec,
			wantTTL: 3600,
		},
		{
			name:        "successCondition over job",
			job:         v1alpha1.JobStep{SuccessCondition: "job.status.succeeded >= 1 && object.metadata.name == 'db'"},
			spec:        validSpec,
			wantTTL:     3600,
			wantSuccess: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := compileAction(t, tt.namespaced, tt.job, tt.spec)
			if a.step != stepName || a.namespaced != tt.namespaced {
				t.Errorf("action step %q namespaced %v, want %q %v", a.step, a.namespaced, stepName, tt.namespaced)
			}
			if a.ttl != tt.wantTTL {
				t.Errorf("ttl %d, want %d", a.ttl, tt.wantTTL)
			}
			if (a.namespace != nil) != tt.wantNamespace {
				t.Errorf("namespace template %v, want compiled %v", a.namespace, tt.wantNamespace)
			}
			if (a.success != nil) != tt.wantSuccess {
				t.Errorf("successCondition %v, want compiled %v", a.success, tt.wantSuccess)
			}
			if a.spec == nil {
				t.Error("spec tree not compiled")
			}
			if len(a.labels) != len(tt.job.Template.Metadata.Labels) || len(a.annotations) != len(tt.job.Template.Metadata.Annotations) {
				t.Errorf("compiled %d labels and %d annotations, want %d and %d", len(a.labels), len(a.annotations),
					len(tt.job.Template.Metadata.Labels), len(tt.job.Template.Metadata.Annotations))
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// build

func TestBuildNamespaceAndOwner(t *testing.T) {
	tests := []struct {
		name            string
		namespaced      bool
		jobNamespace    string // job.namespace
		policyNamespace string // Input.PolicyNamespace
		targetNamespace string
		want            string
		wantOwner       bool
		wantErr         string
	}{
		{
			name:            "TeardownPolicy: its own namespace",
			namespaced:      true,
			policyNamespace: policyNS,
			targetNamespace: targetNS,
			want:            policyNS,
			wantOwner:       true,
		},
		{
			name:            "TeardownPolicy naming its own namespace",
			namespaced:      true,
			jobNamespace:    policyNS,
			policyNamespace: policyNS,
			targetNamespace: targetNS,
			want:            policyNS,
			wantOwner:       true,
		},
		{
			name:            "TeardownPolicy whose namespace differs from the run's input",
			namespaced:      true,
			jobNamespace:    policyNS,
			policyNamespace: "elsewhere",
			targetNamespace: targetNS,
			wantErr:         `a TeardownPolicy runs Jobs only in its own namespace "elsewhere"`,
		},
		{
			name:            "ClusterTeardownPolicy: the target's namespace by default",
			targetNamespace: targetNS,
			want:            targetNS,
		},
		{
			name:            "ClusterTeardownPolicy: the target's namespace is the run's",
			targetNamespace: runNS,
			want:            runNS,
			wantOwner:       true,
		},
		{
			name:            "ClusterTeardownPolicy: rendered job.namespace",
			jobNamespace:    "${object.metadata.namespace}-jobs",
			targetNamespace: targetNS,
			want:            "prod-jobs",
		},
		{
			name:            "ClusterTeardownPolicy: literal job.namespace for a cluster-scoped target",
			jobNamespace:    "teardown-jobs",
			targetNamespace: "",
			want:            "teardown-jobs",
		},
		{
			name:            "ClusterTeardownPolicy: cluster-scoped target without job.namespace",
			targetNamespace: "",
			wantErr:         "the target is cluster-scoped: set job.namespace",
		},
		{
			name:            "ClusterTeardownPolicy: rendered namespace is not a DNS label",
			jobNamespace:    "${object.spec.bad}",
			targetNamespace: targetNS,
			wantErr:         `namespace "Not_A_Label": a lowercase RFC 1123 label`,
		},
		{
			name:            "ClusterTeardownPolicy: namespace cannot be rendered",
			jobNamespace:    "${object.spec.missing}",
			targetNamespace: targetNS,
			wantErr:         "namespace: ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := compileAction(t, tt.namespaced, v1alpha1.JobStep{Namespace: tt.jobNamespace}, validSpec)
			in := testInput(tt.policyNamespace, tt.targetNamespace)
			job, err := a.build(context.Background(), in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("build: Job in %q, want error %q", job.Namespace, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("build error %q does not mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			if job.Namespace != tt.want {
				t.Errorf("Job namespace %q, want %q", job.Namespace, tt.want)
			}
			var wantRefs []metav1.OwnerReference
			if tt.wantOwner {
				wantRefs = []metav1.OwnerReference{{APIVersion: "teardown.dev/v1alpha1", Kind: "TeardownRun", Name: runName, UID: runUID}}
			}
			if !reflect.DeepEqual(job.OwnerReferences, wantRefs) {
				t.Errorf("ownerReferences %+v, want %+v", job.OwnerReferences, wantRefs)
			}
		})
	}
}

func TestBuildJob(t *testing.T) {
	const spec = `{
		"backoffLimit": 0,
		"ttlSecondsAfterFinished": 600,
		"template": {
			"metadata": {"labels": {"app": "dump-${object.metadata.name}"}, "annotations": {"a": "b"}},
			"spec": {
				"initContainers": [{"name": "init", "image": "busybox"}],
				"containers": [
					{"name": "main", "image": "busybox", "command": ["sh", "-c", "echo $${HOME} ${object.metadata.name}"],
					 "env": [{"name": "TEARDOWN_STEP", "value": "mine"}, {"name": "FOO", "value": "${object.metadata.namespace}"}],
					 "resources": {"limits": {"memory": "${object.spec.memory}"}}},
					{"name": "side", "image": "busybox"}
				]
			}
		}
	}`
	job := v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Metadata: v1alpha1.JobTemplateMetadata{
		Labels:      map[string]string{"tier": "${object.metadata.labels.tier}", "app": "dump"},
		Annotations: map[string]string{"target": "${object.metadata.namespace}/${object.metadata.name}", "literal": "$${x}"},
	}}}
	a := compileAction(t, false, job, spec)
	if a.ttl != 600 {
		t.Errorf("compiled ttl %d, want 600", a.ttl)
	}
	got, err := a.build(context.Background(), testInput("", targetNS))
	if err != nil {
		t.Fatalf("build: %v", err)
	}

	if got.APIVersion != "batch/v1" || got.Kind != "Job" {
		t.Errorf("TypeMeta %s %s, want batch/v1 Job", got.APIVersion, got.Kind)
	}
	if want := naming.JobName(runName, stepName, 2); got.Name != want {
		t.Errorf("name %q, want %q", got.Name, want)
	}
	own := map[string]string{
		v1alpha1.LabelRun:          runName,
		v1alpha1.LabelRunNamespace: runNS,
		v1alpha1.LabelRunUID:       string(runUID),
		v1alpha1.LabelStep:         stepName,
		v1alpha1.LabelAttempt:      "2",
		"teardown.dev/policy":      "x",
	}
	wantJobLabels := map[string]string{"tier": "gold", "app": "dump"}
	wantPodLabels := map[string]string{"app": "dump-db"}
	for k, v := range own {
		wantJobLabels[k], wantPodLabels[k] = v, v
	}
	if !reflect.DeepEqual(got.Labels, wantJobLabels) {
		t.Errorf("Job labels\n%v\nwant\n%v", got.Labels, wantJobLabels)
	}
	if !reflect.DeepEqual(got.Spec.Template.Labels, wantPodLabels) {
		t.Errorf("pod labels\n%v\nwant\n%v", got.Spec.Template.Labels, wantPodLabels)
	}
	if want := map[string]string{"target": "prod/db", "literal": "${x}", "teardown.dev/ttl-seconds-after-finished": "600"}; !reflect.DeepEqual(got.Annotations, want) {
		t.Errorf("Job annotations %v, want %v", got.Annotations, want)
	}
	if want := map[string]string{"a": "b"}; !reflect.DeepEqual(got.Spec.Template.Annotations, want) {
		t.Errorf("pod annotations %v, want %v", got.Spec.Template.Annotations, want)
	}

	pod := got.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never", pod.RestartPolicy)
	}
	if got.Spec.TTLSecondsAfterFinished != nil {
		t.Errorf("ttlSecondsAfterFinished %d on the created Job, want unset", *got.Spec.TTLSecondsAfterFinished)
	}
	if got.Spec.BackoffLimit == nil || *got.Spec.BackoffLimit != 0 {
		t.Errorf("backoffLimit %v, want 0", got.Spec.BackoffLimit)
	}
	if want := []string{"sh", "-c", "echo ${HOME} db"}; !reflect.DeepEqual(pod.Containers[0].Command, want) {
		t.Errorf("command %q, want %q", pod.Containers[0].Command, want)
	}
	if q := pod.Containers[0].Resources.Limits[corev1.ResourceMemory]; !q.Equal(resource.MustParse("64Mi")) {
		t.Errorf("memory limit %s, want 64Mi", q.String())
	}

	ours := []corev1.EnvVar{
		{Name: EnvTargetAPIVersion, Value: "v1"},
		{Name: EnvTargetKind, Value: "ConfigMap"},
		{Name: EnvTargetNamespace, Value: targetNS},
		{Name: EnvTargetName, Value: "db"},
		{Name: EnvTargetUID, Value: string(targetUID)},
		{Name: EnvRunName, Value: runName},
		{Name: EnvRunNamespace, Value: runNS},
		{Name: EnvRunUID, Value: string(runUID)},
		{Name: EnvStep, Value: stepName},
		{Name: EnvAttempt, Value: "2"},
	}
	var oursButStep []corev1.EnvVar
	for _, e := range ours {
		if e.Name != EnvStep {
			oursButStep = append(oursButStep, e)
		}
	}
	wantEnv := map[string][]corev1.EnvVar{
		"init": ours,
		"main": append(oursButStep, corev1.EnvVar{Name: EnvStep, Value: "mine"}, corev1.EnvVar{Name: "FOO", Value: "prod"}),
		"side": ours,
	}
	containers := append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...)
	if len(containers) != 3 {
		t.Fatalf("%d containers, want 3", len(containers))
	}
	for _, c := range containers {
		if !reflect.DeepEqual(c.Env, wantEnv[c.Name]) {
			t.Errorf("container %s env\n%v\nwant\n%v", c.Name, c.Env, wantEnv[c.Name])
		}
	}
}

// TestBuildIndependentAttempts builds two attempts from one action and checks that they share
// nothing: the second has its own name and labels, and changing the first leaves it alone.
func TestBuildIndependentAttempts(t *testing.T) {
	a := compileAction(t, true, v1alpha1.JobStep{}, `{"template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`)
	in := testInput(policyNS, targetNS)
	first, err := a.build(context.Background(), in)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	first.Spec.Template.Labels["app"] = "changed"
	first.Spec.Template.Spec.Containers[0].Image = "changed"
	in.Status.Attempts = 3
	second, err := a.build(context.Background(), in)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if second.Name != naming.JobName(runName, stepName, 3) || second.Name == first.Name {
		t.Errorf("second attempt named %q (first %q), want %q", second.Name, first.Name, naming.JobName(runName, stepName, 3))
	}
	if second.Labels[v1alpha1.LabelAttempt] != "3" || second.Spec.Template.Labels[v1alpha1.LabelAttempt] != "3" {
		t.Errorf("second attempt labelled attempt %q / %q, want 3", second.Labels[v1alpha1.LabelAttempt], second.Spec.Template.Labels[v1alpha1.LabelAttempt])
	}
	if second.Spec.Template.Labels["app"] != "x" || second.Spec.Template.Spec.Containers[0].Image != "busybox" {
		t.Errorf("second attempt shares values with the first: %v %q", second.Spec.Template.Labels, second.Spec.Template.Spec.Containers[0].Image)
	}
}

func TestJobDeadline(t *testing.T) {
	tests := []struct {
		left time.Duration
		want int64
	}{
		{time.Hour, 3570},            // the margin is at most 30s
		{5 * time.Minute, 270},       // a tenth
		{10 * time.Second, 9},        // a tenth
		{1500 * time.Millisecond, 1}, // at least 1s
		{-time.Minute, 1},
	}
	for _, tt := range tests {
		if got := jobDeadline(tt.left); got != tt.want {
			t.Errorf("jobDeadline(%s) = %d, want %d", tt.left, got, tt.want)
		}
	}
}

func TestBuildActiveDeadline(t *testing.T) {
	tests := []struct {
		name     string
		user     string  // activeDeadlineSeconds in the template, if any
		deadline *string // step deadline relative to now; nil for none
		min, max int64   // accepted range; 0, 0 for unset
	}{
		// 90s left, less a margin of a tenth: the Job controller fails the Job before the step times out.
		{name: "capped before the step's remaining time", deadline: ptrTo("90s"), min: 80, max: 81},
		{name: "a larger user value is capped", user: `"activeDeadlineSeconds": 1000,`, deadline: ptrTo("90s"), min: 80, max: 81},
		{name: "a smaller user value is kept", user: `"activeDeadlineSeconds": 30,`, deadline: ptrTo("90s"), min: 30, max: 30},
		{name: "deadline passed: one second", deadline: ptrTo("-10s"), min: 1, max: 1},
		{name: "no deadline, no user value"},
		{name: "no deadline keeps the user value", user: `"activeDeadlineSeconds": 5000,`, min: 5000, max: 5000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := compileAction(t, true, v1alpha1.JobStep{}, `{`+tt.user+`"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`)
			in := testInput(policyNS, targetNS)
			in.Status.Deadline = nil
			if tt.deadline != nil {
				d, err := time.ParseDuration(*tt.deadline)
				if err != nil {
					t.Fatal(err)
				}
				in.Status.Deadline = &metav1.MicroTime{Time: time.Now().Add(d)}
			}
			job, err := a.build(context.Background(), in)
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			got := job.Spec.ActiveDeadlineSeconds
			switch {
			case tt.max == 0 && got != nil:
				t.Errorf("activeDeadlineSeconds %d, want unset", *got)
			case tt.max == 0:
			case got == nil:
				t.Errorf("activeDeadlineSeconds unset, want %d..%d", tt.min, tt.max)
			case *got < tt.min || *got > tt.max:
				t.Errorf("activeDeadlineSeconds %d, want %d..%d", *got, tt.min, tt.max)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name    string
		job     v1alpha1.JobStep
		spec    string
		wantErr []string
	}{
		{
			name:    "quantity rendered to garbage",
			spec:    `{"template": {"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"memory": "${object.spec.size}"}}}]}}}`,
			wantErr: []string{"template.spec after interpolation", "quantities must match"},
		},
		{
			name:    "spec string cannot be rendered",
			spec:    `{"template": {"spec": {"containers": [{"name": "c", "image": "${object.spec.image}"}]}}}`,
			wantErr: []string{"spec.steps[0].job.template.spec.template.spec.containers[0].image: ", "no such key: image"},
		},
		{
			name:    "label cannot be rendered",
			job:     v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Metadata: v1alpha1.JobTemplateMetadata{Labels: map[string]string{"owner": "${object.metadata.labels.owner}"}}}},
			spec:    validSpec,
			wantErr: []string{"template.metadata.labels[owner]: ", "no such key: owner"},
		},
		{
			name:    "annotation cannot be rendered",
			job:     v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Metadata: v1alpha1.JobTemplateMetadata{Annotations: map[string]string{"n": "${ null }"}}}},
			spec:    validSpec,
			wantErr: []string{"template.metadata.annotations[n]: ", "value is null"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := compileAction(t, false, tt.job, tt.spec)
			job, err := a.build(context.Background(), testInput("", targetNS))
			if err == nil {
				t.Fatalf("build made Job %s/%s, want an error", job.Namespace, job.Name)
			}
			if job != nil {
				t.Errorf("build returned a Job with an error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("build error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// state

func TestStateRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		st   state
		want map[string]string
	}{
		{
			name: "new attempt",
			st:   state{Attempt: 1},
			want: map[string]string{"attempt": "1"},
		},
		{
			name: "created",
			st:   state{Attempt: 2, Namespace: "shop", Name: "db-x1-dump-2", UID: "job-uid"},
			want: map[string]string{"attempt": "2", "job": "shop/db-x1-dump-2", "jobUID": "job-uid"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.st.Encode(recordKeys)
			if !reflect.DeepEqual(m, tt.want) {
				t.Errorf("encode = %v, want %v", m, tt.want)
			}
			if got := readState(m); got != tt.st {
				t.Errorf("readState(encode()) = %+v, want %+v", got, tt.st)
			}
		})
	}
}

func TestReadStateMissingOrBad(t *testing.T) {
	tests := []struct {
		name string
		m    map[string]string
		want state
	}{
		{"nil", nil, state{}},
		{"attempt not a number", map[string]string{"attempt": "x"}, state{}},
		{"unknown keys ignored", map[string]string{"attempt": "4", "outcome": "Failed"}, state{Attempt: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := readState(tt.m); got != tt.want {
				t.Errorf("readState(%v) = %+v, want %+v", tt.m, got, tt.want)
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// logs

func TestTail(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		max  int
		want string
	}{
		{"empty", "", 10, ""},
		{"short log unchanged", "one\ntwo", 100, "one\ntwo"},
		{"trailing newlines trimmed", "one\ntwo\n\n\n", 100, "one\ntwo"},
		{"exactly max", "0123456789", 10, "0123456789"},
		{"exactly max after trimming", "0123456789\n", 10, "0123456789"},
		{"cut inside a line starts at the next line", "line1\nline2\nline3\n", 8, "line3"},
		{"cut inside a long line", "first\n0123456789abcdef\nend", 12, "end"},
		{"one long line keeps its end", "0123456789abcdef", 6, "abcdef"},
		{"cut inside a character", "ééé", 3, "é"},                     // é is 2 bytes: the cut falls on a continuation byte
		{"cut inside a 4-byte character", "a😀😀", 6, "😀"},              // 9 bytes; the cut is 2 bytes into the first emoji
		{"cut inside a character of a long line", "x\n€€€€", 7, "€€"}, // € is 3 bytes; the cut is 2 bytes into one
		{"invalid UTF-8 in a short log", "a\xffb", 10, "a\uFFFDb"},
		{"cut exactly at a line start keeps that line", "aaaa\nbbbb\ncccc", 9, "bbbb\ncccc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tail([]byte(tt.raw), tt.max); got != tt.want {
				t.Errorf("tail(%q, %d) = %q, want %q", tt.raw, tt.max, got, tt.want)
			}
		})
	}
}

// TestTailBounds checks, over many cuts of one log, that the result is never longer than max, is
// valid UTF-8, is the end of the log, and starts at a line when the cut left a whole line.
func TestTailBounds(t *testing.T) {
	log := []byte("start\nline with ünïcödé 😀 characters\n\nshort\n" + strings.Repeat("x", 40) + "\nthe last line ✓\n")
	trimmed := bytes.TrimRight(log, "\n")
	for max := 1; max <= len(log)+1; max++ {
		got := tail(log, max)
		if len(got) > max {
			t.Errorf("tail(max %d) = %q: %d bytes", max, got, len(got))
		}
		if !utf8.ValidString(got) {
			t.Errorf("tail(max %d) = %q: not valid UTF-8", max, got)
		}
		if !bytes.HasSuffix(trimmed, []byte(got)) {
			t.Errorf("tail(max %d) = %q: not the end of the log", max, got)
		}
		if len(trimmed) > max && strings.Contains(string(trimmed[len(trimmed)-max:]), "\n") {
			if start := len(trimmed) - len(got); start > 0 && trimmed[start-1] != '\n' {
				t.Errorf("tail(max %d) = %q: does not start at a line", max, got)
			}
		}
	}
}

func TestFailedContainer(t *testing.T) {
	base := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(sec int) metav1.Time { return metav1.NewTime(base.Add(time.Duration(sec) * time.Second)) }
	exited := func(name string, code int32, sec int) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: at(sec)}}}
	}
	restarted := func(name string, code int32, sec int) corev1.ContainerStatus {
		return corev1.ContainerStatus{
			Name:                 name,
			State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(sec + 1)}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: at(sec)}},
		}
	}
	pod := func(name string, created int, phase corev1.PodPhase, init []corev1.ContainerStatus, ctrs ...corev1.ContainerStatus) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created)},
			Status:     corev1.PodStatus{Phase: phase, InitContainerStatuses: init, ContainerStatuses: ctrs},
		}
	}
	tests := []struct {
		name    string
		pods    []corev1.Pod
		wantPod string // "" for none
		wantCtr string // "" for none
	}{
		{name: "no pods"},
		{
			name: "only succeeded pods",
			pods: []corev1.Pod{
				pod("a", 0, corev1.PodSucceeded, nil, exited("main", 0, 10)),
				pod("b", 5, corev1.PodSucceeded, []corev1.ContainerStatus{exited("init", 0, 6)}, exited("main", 0, 20)),
			},
		},
		{
			name:    "one failed container",
			pods:    []corev1.Pod{pod("a", 0, corev1.PodFailed, nil, exited("ok", 0, 30), exited("main", 2, 10))},
			wantPod: "a", wantCtr: "main",
		},
		{
			name: "the most recently finished non-zero exit across pods",
			pods: []corev1.Pod{
				pod("old", 0, corev1.PodFailed, nil, exited("main", 1, 50)),
				pod("new", 10, corev1.PodFailed, nil, exited("main", 1, 40)),
			},
			wantPod: "old", wantCtr: "main",
		},
		{
			name: "an init container that failed last",
			pods: []corev1.Pod{
				pod("a", 0, corev1.PodFailed, nil, exited("main", 1, 10)),
				pod("b", 5, corev1.PodFailed, []corev1.ContainerStatus{exited("init", 3, 20)}),
			},
			wantPod: "b", wantCtr: "init",
		},
		{
			name: "a container that failed and was restarted",
			pods: []corev1.Pod{
				pod("a", 0, corev1.PodFailed, nil, exited("main", 1, 10)),
				pod("b", 5, corev1.PodRunning, nil, restarted("main", 137, 30)),
			},
			wantPod: "b", wantCtr: "main",
		},
		{
			name: "a restarted container that then succeeded is not a failure",
			pods: []corev1.Pod{
				pod("a", 0, corev1.PodSucceeded, nil, corev1.ContainerStatus{
					Name:                 "main",
					State:                corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, FinishedAt: at(40)}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: at(30)}},
				}),
			},
		},
		{
			name: "no failed container: the newest failed pod",
			pods: []corev1.Pod{
				pod("evicted-old", 0, corev1.PodFailed, nil),
				pod("evicted-new", 20, corev1.PodFailed, nil),
				pod("running", 30, corev1.PodRunning, nil, corev1.ContainerStatus{Name: "main"}),
				pod("done", 40, corev1.PodSucceeded, nil, exited("main", 0, 50)),
				pod("evicted-mid", 10, corev1.PodFailed, nil),
			},
			wantPod: "evicted-new",
		},
		{
			name: "failed at its deadline while running: the running container of the newest pod",
			pods: []corev1.Pod{
				pod("old", 0, corev1.PodSucceeded, nil, exited("main", 0, 5)),
				pod("stopping", 10, corev1.PodRunning, nil, exited("sidecar", 0, 12),
					corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(11)}}}),
			},
			wantPod: "stopping", wantCtr: "main",
		},
		{
			name: "a failed container wins over a newer failed pod",
			pods: []corev1.Pod{
				pod("crashed", 0, corev1.PodFailed, nil, exited("main", 1, 10)),
				pod("evicted", 100, corev1.PodFailed, nil),
			},
			wantPod: "crashed", wantCtr: "main",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := failedContainer(tt.pods)
			var gotPod, gotCtr string
			if p != nil {
				gotPod = p.Name
			}
			if c != nil {
				gotCtr = c.Name
			}
			if gotPod != tt.wantPod || gotCtr != tt.wantCtr {
				t.Errorf("failedContainer = pod %q container %q, want pod %q container %q", gotPod, gotCtr, tt.wantPod, tt.wantCtr)
			}
			if p == nil && c != nil {
				t.Error("a container without a pod")
			}
		})
	}
}

func TestDescribeState(t *testing.T) {
	tests := []struct {
		name string
		c    corev1.ContainerStatus
		want string
	}{
		{
			"still running",
			corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC))}}},
			"was still running (started 2024-01-01T12:00:00Z) and is being stopped",
		},
		{"waiting", corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}, "did not terminate"},
		{"no state at all", corev1.ContainerStatus{}, "did not terminate"},
		{"code only", corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3}}}, "exited with code 3"},
		{"code and reason", corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}, "exited with code 137 (OOMKilled)"},
		{
			"reason and a multi-line message",
			corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "  boom\nstack trace\n"}}},
			"exited with code 1 (Error): boom",
		},
		{
			"from the last termination",
			corev1.ContainerStatus{
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}},
			},
			"exited with code 2 (Error)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describeState(&tt.c); got != tt.want {
				t.Errorf("describeState = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFirstLine(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"empty", "", ""},
		{"one line", "boom", "boom"},
		{"spaces trimmed, first line kept", "\n  first line\nsecond\nthird", "first line"},
		{"exactly 300 bytes", strings.Repeat("a", 300), strings.Repeat("a", 300)},
		{"long line cut at 300 bytes", strings.Repeat("a", 301), strings.Repeat("a", 300) + "..."},
		{"long first line of several", strings.Repeat("b", 400) + "\nnext", strings.Repeat("b", 300) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstLine(tt.in); got != tt.want {
				t.Errorf("firstLine(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestFirstLineValidUTF8 checks that shortening a message never splits a character: the result
// goes into the run's status message.
func TestFirstLineValidUTF8(t *testing.T) {
	in := "a" + strings.Repeat("é", 200) // byte 300 falls in the middle of an é
	got := firstLine(in)
	if !utf8.ValidString(got) {
		t.Errorf("firstLine(%d bytes) ends in a split character: %q", len(in), got[len(got)-8:])
	}
	if !strings.HasSuffix(got, "...") || len(got) > 303 {
		t.Errorf("firstLine(%d bytes) = %d bytes %q..., want at most 300 bytes and ...", len(in), len(got), got[:10])
	}
}

func TestWithEnv(t *testing.T) {
	ours := []corev1.EnvVar{{Name: "A", Value: "a"}, {Name: "B", Value: "b"}, {Name: "C", Value: "c"}}
	tests := []struct {
		name string
		own  []corev1.EnvVar
		want []corev1.EnvVar
	}{
		{"no own variables", nil, ours},
		{
			"ours first, then theirs",
			[]corev1.EnvVar{{Name: "X", Value: "$(A)"}},
			[]corev1.EnvVar{{Name: "A", Value: "a"}, {Name: "B", Value: "b"}, {Name: "C", Value: "c"}, {Name: "X", Value: "$(A)"}},
		},
		{
			"a variable the template sets is theirs, in their place",
			[]corev1.EnvVar{{Name: "Z", Value: "z"}, {Name: "B", Value: "mine"}},
			[]corev1.EnvVar{{Name: "A", Value: "a"}, {Name: "C", Value: "c"}, {Name: "Z", Value: "z"}, {Name: "B", Value: "mine"}},
		},
		{
			"a variable from a secret is not overridden",
			[]corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}},
			[]corev1.EnvVar{{Name: "B", Value: "b"}, {Name: "C", Value: "c"}, {Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}},
		},
		{
			"all set by the template",
			[]corev1.EnvVar{{Name: "C", Value: "3"}, {Name: "B", Value: "2"}, {Name: "A", Value: "1"}},
			[]corev1.EnvVar{{Name: "C", Value: "3"}, {Name: "B", Value: "2"}, {Name: "A", Value: "1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := withEnv(tt.own, ours)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("withEnv = %v, want %v", envNames(got), envNames(tt.want))
			}
		})
	}
	if got := withEnv(nil, nil); len(got) != 0 {
		t.Errorf("withEnv(nil, nil) = %v, want empty", got)
	}
}

func TestOurs(t *testing.T) {
	run := testRun(targetNS)
	labels := func(uid, step, attempt string) map[string]string {
		return map[string]string{v1alpha1.LabelRunUID: uid, v1alpha1.LabelStep: step, v1alpha1.LabelAttempt: attempt, v1alpha1.LabelRun: runName}
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{"this run, step and attempt", labels(string(runUID), stepName, "2"), true},
		{"another run of the same name", labels("other-uid", stepName, "2"), false},
		{"another step", labels(string(runUID), "other", "2"), false},
		{"another attempt", labels(string(runUID), stepName, "1"), false},
		{"attempt written differently", labels(string(runUID), stepName, "02"), false},
		{"no labels", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Labels: tt.labels}}
			if got := ours(job, run, stepName, 2); got != tt.want {
				t.Errorf("ours = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestOursAcceptsBuiltJob checks that the labels build puts on a Job are the ones ours looks for.
func TestOursAcceptsBuiltJob(t *testing.T) {
	a := compileAction(t, true, v1alpha1.JobStep{}, validSpec)
	in := testInput(policyNS, targetNS)
	job, err := a.build(context.Background(), in)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if !ours(job, in.Run, stepName, 2) {
		t.Errorf("ours rejects the Job build made, labels %v", job.Labels)
	}
	if ours(job, in.Run, stepName, 3) {
		t.Error("ours accepts attempt 2's Job for attempt 3")
	}
}

func TestTerminatingMessage(t *testing.T) {
	tests := []struct {
		name       string
		namespaced bool
		want       []string
		notWant    []string
	}{
		{
			name:    "ClusterTeardownPolicy",
			want:    []string{"namespace shop is being deleted", "no Job can be created in a terminating namespace"},
			notWant: []string{"ClusterTeardownPolicy", "TeardownPolicy runs"},
		},
		{
			name:       "TeardownPolicy",
			namespaced: true,
			want:       []string{"namespace shop is being deleted", "a TeardownPolicy runs Jobs only in its own namespace", "use a ClusterTeardownPolicy whose job.namespace names another namespace"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := terminatingMessage("shop", tt.namespaced)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("terminatingMessage = %q, does not mention %q", got, w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("terminatingMessage = %q, mentions %q", got, w)
				}
			}
		})
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		name   string
		status batchv1.JobStatus
		want   string
	}{
		{"nothing yet", batchv1.JobStatus{}, "active 0, succeeded 0, failed 0"},
		{"mixed", batchv1.JobStatus{Active: 1, Succeeded: 2, Failed: 3}, "active 1, succeeded 2, failed 3"},
		{"pods stopping", batchv1.JobStatus{Terminating: ptr.To[int32](1)}, "active 0, terminating 1, succeeded 0, failed 0"},
		{
			"with pods not counted yet",
			batchv1.JobStatus{Active: 1, Failed: 1, UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{Failed: []types.UID{"a", "b"}, Succeeded: []types.UID{"c"}}},
			"active 1, succeeded 1, failed 3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summary(&batchv1.Job{Status: tt.status}); got != tt.want {
				t.Errorf("summary = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCondition(t *testing.T) {
	job := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue},
		{Type: batchv1.JobComplete, Status: corev1.ConditionFalse},
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"},
		{Type: batchv1.JobFailed, Status: corev1.ConditionUnknown},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"},
	}}}
	tests := []struct {
		name  string
		typ   batchv1.JobConditionType
		index int // into job.Status.Conditions; -1 for nil
	}{
		{"true condition", batchv1.JobSuspended, 0},
		{"false condition is none", batchv1.JobComplete, -1},
		{"the true one of several", batchv1.JobFailed, 4},
		{"absent", batchv1.JobSuccessCriteriaMet, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := condition(job, tt.typ)
			switch {
			case tt.index < 0 && got != nil:
				t.Errorf("condition(%s) = %+v, want nil", tt.typ, *got)
			case tt.index >= 0 && got != &job.Status.Conditions[tt.index]:
				t.Errorf("condition(%s) = %v, want condition %d", tt.typ, got, tt.index)
			}
		})
	}
	if got := condition(&batchv1.Job{}, batchv1.JobComplete); got != nil {
		t.Errorf("condition on a Job without conditions = %+v, want nil", *got)
	}
}

func TestOutcome(t *testing.T) {
	at := func(sec int) metav1.Time { return metav1.NewTime(time.Date(2024, 1, 1, 12, 0, sec, 0, time.UTC)) }
	cond := func(t batchv1.JobConditionType, reason string, sec int) batchv1.JobCondition {
		return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, LastTransitionTime: at(sec)}
	}
	tests := []struct {
		name       string
		conditions []batchv1.JobCondition
		completion *metav1.Time
		stopping   bool
		want       string // "complete REASON", "failed REASON" or ""
		finished   int    // second of finishTime; -1 for zero
	}{
		{name: "running", want: "", finished: -1},
		{name: "failure decided, pods still terminating", conditions: []batchv1.JobCondition{cond(batchv1.JobFailureTarget, "DeadlineExceeded", 7)}, stopping: true, want: "failed DeadlineExceeded", finished: 7},
		{name: "failure decided, no pod left: Failed follows", conditions: []batchv1.JobCondition{cond(batchv1.JobFailureTarget, "BackoffLimitExceeded", 7)}, want: "", finished: 7},
		{name: "failed: decided when the failure was", conditions: []batchv1.JobCondition{cond(batchv1.JobFailureTarget, "DeadlineExceeded", 7), cond(batchv1.JobFailed, "DeadlineExceeded", 37)}, want: "failed DeadlineExceeded", finished: 7},
		{name: "failed without a FailureTarget", conditions: []batchv1.JobCondition{cond(batchv1.JobFailed, "BackoffLimitExceeded", 37)}, want: "failed BackoffLimitExceeded", finished: 37},
		{name: "success decided, pods still terminating", conditions: []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, "SuccessPolicy", 5)}, stopping: true, want: "complete SuccessPolicy", finished: 5},
		{name: "complete after a success policy: decided when it was met", conditions: []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, "", 5), cond(batchv1.JobComplete, "", 9)}, completion: ptr.To(at(8)), want: "complete ", finished: 5},
		{name: "complete, at its completion time", conditions: []batchv1.JobCondition{cond(batchv1.JobComplete, "", 9)}, completion: ptr.To(at(8)), want: "complete ", finished: 8},
		{name: "complete without a completion time", conditions: []batchv1.JobCondition{cond(batchv1.JobComplete, "", 9)}, want: "complete ", finished: 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := &batchv1.Job{Status: batchv1.JobStatus{Conditions: tt.conditions, CompletionTime: tt.completion}}
			if tt.stopping {
				job.Status.Terminating = ptr.To[int32](1)
			}
			complete, failed := outcome(job)
			got := ""
			switch {
			case complete != nil && failed != nil:
				t.Fatal("both complete and failed")
			case complete != nil:
				got = "complete " + complete.Reason
			case failed != nil:
				got = "failed " + failed.Reason
			}
			if got != tt.want {
				t.Errorf("outcome = %q, want %q", got, tt.want)
			}
			want := time.Time{}
			if tt.finished >= 0 {
				want = at(tt.finished).Time
			}
			if f := finishTime(job); !f.Equal(want) {
				t.Errorf("finishTime = %v, want %v", f, want)
			}
		})
	}
}

func TestDecideSuccessConditionWaitsForComplete(t *testing.T) {
	a := compileAction(t, true, v1alpha1.JobStep{SuccessCondition: "job.status.succeeded >= 1"}, validSpec)
	met := batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}
	complete := batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
	tests := []struct {
		name    string
		status  batchv1.JobStatus
		waits   bool
		outcome steps.Outcome
		message string
	}{
		{name: "met, pods stopping, the succeeded pod not counted yet: waits", status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{met}, Terminating: ptr.To[int32](1)}, waits: true},
		{name: "met, pods stopping, counted: succeeds", status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{met}, Terminating: ptr.To[int32](1), Succeeded: 1}, outcome: steps.Succeeded, message: "successCondition holds"},
		{name: "complete, not counted: fails", status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{met, complete}}, outcome: steps.Failed, message: "cannot be evaluated"},
		{name: "complete and counted: succeeds", status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{met, complete}, Succeeded: 1}, outcome: steps.Succeeded, message: "successCondition holds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j"}, Status: tt.status}
			res := a.decide(context.Background(), testInput(policyNS, policyNS), state{}, job)
			switch {
			case tt.waits && res != nil:
				t.Errorf("decide = %v %q, want to wait", res.Outcome, res.Message)
			case tt.waits:
			case res == nil:
				t.Errorf("decide waits, want %v %q", tt.outcome, tt.message)
			case res.Outcome != tt.outcome || !strings.Contains(res.Message, tt.message):
				t.Errorf("decide = %v %q, want %v %q", res.Outcome, res.Message, tt.outcome, tt.message)
			}
		})
	}
}
