package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
	"github.com/teardown-dev/teardown-operator/steps/builtin"
)

// compileForPlan compiles p with the built-in kinds and no cluster.
func compileForPlan(t *testing.T, p *v1alpha1.TeardownPolicy) *policy.Compiled {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	v, err := policy.ViewOf(p)
	if err != nil {
		t.Fatal(err)
	}
	c, errs := policy.NewCompiler(env, steps.Build(builtin.Kinds(builtin.Options{}), steps.Deps{}), nil).Compile(v)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return c
}

// TestPlanRendersTheJobTheStepCreates: the Job plan renders is the one the step's first attempt
// creates: its activeDeadlineSeconds from the step's timeout (less the margin the step keeps to
// record the Job's failure), the run's labels and the run as its owner.
func TestPlanRendersTheJobTheStepCreates(t *testing.T) {
	p := &v1alpha1.TeardownPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "dump", UID: "p-uid", Generation: 1},
		Spec: v1alpha1.TeardownPolicySpec{
			TargetRef: v1alpha1.TargetReference{APIVersion: "v1", Kind: "ConfigMap"},
			Pipeline: v1alpha1.Pipeline{Steps: []v1alpha1.Step{{
				Name: "final-dump", Timeout: &metav1.Duration{Duration: 10 * time.Minute},
				Job: &v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Spec: runtime.RawExtension{
					Raw: []byte(`{"template": {"spec": {"containers": [{"name": "dump", "image": "busybox"}]}}}`)}}},
			}}},
		},
	}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("v1")
	obj.SetKind("ConfigMap")
	obj.SetNamespace("shop")
	obj.SetName("orders")
	obj.SetUID("obj-uid")
	tgt := &target{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespaced: true, Object: obj}

	reports := planSteps(context.Background(), compileForPlan(t, p), tgt, "teardown-system")
	if len(reports) != 1 || reports[0].Error != "" {
		t.Fatalf("planSteps = %+v", reports)
	}
	job, ok := reports[0].Rendered.(*batchv1.Job)
	if !ok {
		t.Fatalf("rendered %T, want a Job", reports[0].Rendered)
	}
	// 10m less a tenth, at most 30s: what jobstep gives a Job whose step has 10m left.
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d != 570 {
		t.Errorf("activeDeadlineSeconds = %v, want 570 (the step's 10m timeout less 30s)", d)
	}
	for k, want := range map[string]string{v1alpha1.LabelStep: "final-dump", v1alpha1.LabelAttempt: "1", v1alpha1.LabelRunUID: "plan"} {
		if got := job.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if refs := job.OwnerReferences; len(refs) != 1 || refs[0].Kind != "TeardownRun" || refs[0].UID != "plan" {
		t.Errorf("ownerReferences = %+v, want the run", refs)
	}
}

// TestJudgeDeletion: whether anyone acts on an object being deleted, and what to do if not.
func TestJudgeDeletion(t *testing.T) {
	down := operatorState{Known: true, Lease: "teardown-system/l", Since: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	up := operatorState{Known: true, Held: true}
	unknown := operatorState{Why: "no lease"}
	held := &planDeletion{Finalizers: []string{"clusterteardownpolicy.teardown.dev/archive"}}
	tests := map[string]struct {
		d               *planDeletion
		haveRuns, ended bool
		op              operatorState
		acting          bool
		words           []string
	}{
		"operator down": {held, true, false, down, false, []string{"nobody acts", "since 2030-01-01T00:00:00Z", "start the operator", "drain --policy ClusterTeardownPolicy/archive"}},
		"operator down, a TeardownPolicy's finalizer": {&planDeletion{Finalizers: []string{"teardownpolicy.teardown.dev/grace"}, Namespace: "shop"}, false, false, down, false,
			[]string{"drain --policy TeardownPolicy/grace -n shop"}},
		"no run, operator running": {held, false, false, up, false, []string{"no run exists", "abandon cm/x"}},
		"no run, operator unknown": {held, false, false, unknown, false, []string{"unknown (no lease)", "start it"}},
		"a run in flight":          {held, true, false, up, true, []string{"kubectl teardown status cm/x"}},
		"runs ended, object kept":  {held, true, true, up, false, []string{"kubectl teardown retry cm/x"}},
		"other controllers' only":  {&planDeletion{}, false, false, down, true, []string{"other controllers only"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			acting, msg := judgeDeletion("cm/x", tc.d, tc.haveRuns, tc.ended, tc.op)
			if acting != tc.acting {
				t.Errorf("acting %v, want %v: %s", acting, tc.acting, msg)
			}
			for _, w := range tc.words {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not say %q", msg, w)
				}
			}
			if tc.op.down() && strings.Contains(msg, "abandon") {
				t.Errorf("%q suggests abandon, which needs the operator running", msg)
			}
		})
	}
}

func TestReadsSteps(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{"https://api.example.com/backups/${steps.backup.outputs.id}", true},
		{"https://api.example.com/backups/${steps['final-backup'].outputs.backupId}", true},
		{`https://api.example.com/backups/${steps["s-1"].outputs.id}`, true},
		{"https://api.example.com/backups/${steps.?backup.outputs.id}", true},
		{"https://api.example.com/objects/${object.metadata.name}", false},
	} {
		s := &policy.Step{Spec: v1alpha1.Step{Name: "s", HTTP: &v1alpha1.HTTPStep{Method: "GET", URL: tc.url}}}
		if got := readsSteps(s); got != tc.want {
			t.Errorf("%s: readsSteps = %v, want %v", tc.url, got, tc.want)
		}
	}
}
