package wait_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
	"github.com/teardown-dev/teardown-operator/steps/wait"
)

var (
	podGVK       = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	deployGVK    = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	namespaceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
)

type listCall struct {
	gvk       schema.GroupVersionKind
	namespace string
	selector  string
	limit     int
}

// fakeLister serves objects from memory. Items are keyed by kind; each list call is recorded.
type fakeLister struct {
	scope   map[schema.GroupVersionKind]bool // namespaced, by kind; kinds not here are not served
	items   map[schema.GroupVersionKind][]any
	listErr error
	calls   []listCall
}

func (f *fakeLister) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	namespaced, ok := f.scope[gvk]
	if !ok {
		return false, fmt.Errorf("no matches for kind %q in version %q", gvk.Kind, gvk.GroupVersion())
	}
	return namespaced, nil
}

func (f *fakeLister) List(_ context.Context, gvk schema.GroupVersionKind, namespace string, selector labels.Selector, limit int) ([]any, error) {
	f.calls = append(f.calls, listCall{gvk: gvk, namespace: namespace, selector: selector.String(), limit: limit})
	if f.listErr != nil {
		return nil, f.listErr
	}
	return f.items[gvk], nil
}

func newLister() *fakeLister {
	return &fakeLister{
		scope: map[schema.GroupVersionKind]bool{podGVK: true, deployGVK: true, namespaceGVK: false},
		items: map[schema.GroupVersionKind][]any{},
	}
}

func compileCtx(t *testing.T) steps.CompileContext {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatalf("NewEnv: %v", err)
	}
	return steps.CompileContext{Env: env}
}

var stepPath = field.NewPath("spec", "steps").Index(0)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func podLookup(name string) v1alpha1.Lookup {
	return v1alpha1.Lookup{Name: name, APIVersion: "v1", Kind: "Pod"}
}

func TestKind(t *testing.T) {
	k := wait.New(nil)
	if k.Name() != "wait" {
		t.Errorf("Name() = %q, want wait", k.Name())
	}
	if k.Configured(&v1alpha1.Step{Name: "x"}) {
		t.Errorf("Configured() = true for a step without wait")
	}
	if !k.Configured(&v1alpha1.Step{Name: "x", Wait: &v1alpha1.WaitStep{}}) {
		t.Errorf("Configured() = false for a step with wait")
	}
	var _ steps.Kind = k
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name string
		wait v1alpha1.WaitStep
		want []string
	}{
		{"neither duration nor until", v1alpha1.WaitStep{},
			[]string{"spec.steps[0].wait: Required value: set duration or until"}},
		{"both duration and until", v1alpha1.WaitStep{Duration: dur(time.Second), Until: "true"},
			[]string{`spec.steps[0].wait: Invalid value: "": set exactly one of duration or until`}},
		{"negative duration", v1alpha1.WaitStep{Duration: dur(-time.Second)},
			[]string{`spec.steps[0].wait.duration: Invalid value: "-1s": must not be negative`}},
		{"lookups with duration", v1alpha1.WaitStep{Duration: dur(time.Second), Lookups: []v1alpha1.Lookup{podLookup("pods")}},
			[]string{`spec.steps[0].wait.lookups: Invalid value: 1: lookups are read only by until`}},
		{"zero interval", v1alpha1.WaitStep{Until: "true", Interval: dur(0)},
			[]string{`spec.steps[0].wait.interval: Invalid value: "0s": must be positive`}},
		{"negative interval and neither", v1alpha1.WaitStep{Interval: dur(-time.Minute)},
			[]string{
				`spec.steps[0].wait.interval: Invalid value: "-1m0s": must be positive`,
				"spec.steps[0].wait: Required value: set duration or until",
			}},
		{"selector operator", v1alpha1.WaitStep{Until: "true", Lookups: []v1alpha1.Lookup{{Name: "pods", APIVersion: "v1", Kind: "Pod",
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Equals", Values: []string{"web"}}}}}}},
			[]string{`spec.steps[0].wait.lookups[0].selector.matchExpressions[0].operator: Invalid value: "Equals": not a valid selector operator`}},
		{"selector literal value", v1alpha1.WaitStep{Until: "true", Lookups: []v1alpha1.Lookup{{Name: "pods", APIVersion: "v1", Kind: "Pod",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web worker", "parent": "${object.metadata.name}"}}}}},
			[]string{`spec.steps[0].wait.lookups[0].selector.matchLabels: Invalid value: "web worker": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`}},
		{"until not bool", v1alpha1.WaitStep{Until: "1 + 1"},
			[]string{`spec.steps[0].wait.until: Invalid value: "1 + 1": must evaluate to bool, not int`}},
		{"until syntax error", v1alpha1.WaitStep{Until: "object.metadata."},
			[]string{"spec.steps[0].wait.until: Invalid value: \"object.metadata.\": ERROR: <input>:1:17: Syntax error: no viable alternative at input '.'\n | object.metadata.\n | ................^"}},
		{"until reads an undeclared lookup", v1alpha1.WaitStep{Until: "size(pods) == 0"},
			[]string{"spec.steps[0].wait.until: Invalid value: \"size(pods) == 0\": ERROR: <input>:1:6: undeclared reference to 'pods' (in container '')\n | size(pods) == 0\n | .....^"}},
		{"reserved lookup name", v1alpha1.WaitStep{Until: "true", Lookups: []v1alpha1.Lookup{podLookup("object")}},
			[]string{`spec.steps[0].wait.lookups[0].name: Invalid value: "object": is a built-in variable name`}},
		{"reserved lookup name now", v1alpha1.WaitStep{Until: "true", Lookups: []v1alpha1.Lookup{podLookup("pods"), podLookup("now")}},
			[]string{`spec.steps[0].wait.lookups[1].name: Invalid value: "now": is a built-in variable name`}},
		{"duplicate lookup names", v1alpha1.WaitStep{Until: "true", Lookups: []v1alpha1.Lookup{podLookup("pods"), podLookup("svcs"), podLookup("pods")}},
			[]string{`spec.steps[0].wait.lookups[2].name: Duplicate value: "pods"`}},
		{"bad apiVersion", v1alpha1.WaitStep{Until: "true", Lookups: []v1alpha1.Lookup{{Name: "pods", APIVersion: "a/b/c", Kind: "Pod"}}},
			[]string{`spec.steps[0].wait.lookups[0].apiVersion: Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c`}},
		{"bad namespace template", v1alpha1.WaitStep{Until: "true", Lookups: []v1alpha1.Lookup{{Name: "pods", APIVersion: "v1", Kind: "Pod", Namespace: "ns-${"}}},
			[]string{`spec.steps[0].wait.lookups[0].namespace: Invalid value: "ns-${": at offset 3: unterminated ${ in "ns-${"`}},
		{"bad matchLabels template", v1alpha1.WaitStep{Until: "true", Lookups: []v1alpha1.Lookup{{
			Name: "pods", APIVersion: "v1", Kind: "Pod",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "${}"}},
		}}},
			[]string{`spec.steps[0].wait.lookups[0].selector.matchLabels[app]: Invalid value: "${}": in ${}: expression is empty`}},
		{"bad matchExpressions value", v1alpha1.WaitStep{Until: "true", Lookups: []v1alpha1.Lookup{{
			Name: "pods", APIVersion: "v1", Kind: "Pod",
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"ok", "${ 'x }"}},
			}},
		}}},
			[]string{`spec.steps[0].wait.lookups[0].selector.matchExpressions[0].values[1]: Invalid value: "${ 'x }": at offset 0: unterminated string literal in "${ 'x }"`}},
		{"several lookup errors", v1alpha1.WaitStep{Until: "true", Lookups: []v1alpha1.Lookup{
			{Name: "run", APIVersion: "v1", Kind: "Pod"},
			{Name: "run", APIVersion: "x/y/z", Kind: "Pod"},
		}},
			[]string{
				`spec.steps[0].wait.lookups[0].name: Invalid value: "run": is a built-in variable name`,
				`spec.steps[0].wait.lookups[1].name: Invalid value: "run": is a built-in variable name`,
				`spec.steps[0].wait.lookups[1].name: Duplicate value: "run"`,
				`spec.steps[0].wait.lookups[1].apiVersion: Invalid value: "x/y/z": unexpected GroupVersion string: x/y/z`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := wait.New(newLister())
			w := tt.wait
			a, errs := k.Compile(compileCtx(t), &v1alpha1.Step{Name: "pause", Wait: &w}, stepPath)
			if a != nil {
				t.Errorf("Compile returned an action with errors")
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Compile errors:\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestCompileValid(t *testing.T) {
	tests := []struct {
		name string
		wait v1alpha1.WaitStep
	}{
		{"duration", v1alpha1.WaitStep{Duration: dur(30 * time.Second)}},
		{"zero duration", v1alpha1.WaitStep{Duration: dur(0)}},
		{"until over object", v1alpha1.WaitStep{Until: "has(object.metadata.labels)"}},
		{"until with interval", v1alpha1.WaitStep{Until: "true", Interval: dur(time.Second)}},
		{"until over lookups", v1alpha1.WaitStep{Until: "size(pods) == 0 && deploys.all(d, d.status.replicas == 0)", Lookups: []v1alpha1.Lookup{
			{Name: "pods", APIVersion: "v1", Kind: "Pod", Namespace: "${object.metadata.namespace}",
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "${object.metadata.name}"}}},
			{Name: "deploys", APIVersion: "apps/v1", Kind: "Deployment"},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.wait
			a, errs := wait.New(newLister()).Compile(compileCtx(t), &v1alpha1.Step{Name: "pause", Wait: &w}, stepPath)
			if len(errs) > 0 {
				t.Fatalf("Compile: %v", errs.ToAggregate())
			}
			if a == nil {
				t.Fatalf("Compile returned no action")
			}
		})
	}
}

func compile(t *testing.T, lister wait.Lister, w v1alpha1.WaitStep) steps.Action {
	t.Helper()
	a, errs := wait.New(lister).Compile(compileCtx(t), &v1alpha1.Step{Name: "pause", Wait: &w}, stepPath)
	if len(errs) > 0 {
		t.Fatalf("Compile: %v", errs.ToAggregate())
	}
	return a
}

func TestExecuteDuration(t *testing.T) {
	start := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name     string
		duration time.Duration
		start    time.Time
		now      time.Time
		want     steps.Result
	}{
		{"just started", 30 * time.Second, start, start,
			steps.Result{Outcome: steps.InProgress, CheckAfter: 30 * time.Second, Message: "waiting until 2024-01-02T03:04:35Z"}},
		{"part way", 30 * time.Second, start, start.Add(10 * time.Second),
			steps.Result{Outcome: steps.InProgress, CheckAfter: 20 * time.Second, Message: "waiting until 2024-01-02T03:04:35Z"}},
		{"one nanosecond left", 30 * time.Second, start, start.Add(30*time.Second - 1),
			steps.Result{Outcome: steps.InProgress, CheckAfter: 1, Message: "waiting until 2024-01-02T03:04:35Z"}},
		{"start in another zone", time.Hour, start.In(time.FixedZone("X", 2*3600)), start.Add(15 * time.Minute),
			steps.Result{Outcome: steps.InProgress, CheckAfter: 45 * time.Minute, Message: "waiting until 2024-01-02T04:04:05Z"}},
		{"at the end", 30 * time.Second, start, start.Add(30 * time.Second),
			steps.Result{Outcome: steps.Succeeded, Message: "waited 30s"}},
		{"after the end", 30 * time.Second, start, start.Add(time.Hour),
			steps.Result{Outcome: steps.Succeeded, Message: "waited 30s"}},
		{"zero duration", 0, start, start,
			steps.Result{Outcome: steps.Succeeded, Message: "waited 0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lister := newLister()
			a := compile(t, lister, v1alpha1.WaitStep{Duration: dur(tt.duration)})
			st := metav1.NewTime(tt.start)
			got := a.Execute(context.Background(), &steps.Input{
				Run:    &v1alpha1.TeardownRun{},
				Status: &v1alpha1.StepStatus{Name: "pause", StartTime: &st},
				Now:    tt.now,
			})
			if tt.want.Outcome == steps.InProgress {
				tt.want.State = map[string]string{"startedAt": tt.start.UTC().Format(time.RFC3339Nano)}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Execute = %+v, want %+v", got, tt.want)
			}
			if len(lister.calls) > 0 {
				t.Errorf("a duration wait listed objects: %+v", lister.calls)
			}
		})
	}
}

// The status's startTime is stored to the second; the wait is measured from the exact start the
// step records in its state, so it never ends early.
func TestExecuteDurationExactStart(t *testing.T) {
	exact := time.Date(2024, 1, 2, 3, 4, 5, 900_000_000, time.UTC)
	stored := metav1.NewTime(exact.Truncate(time.Second))
	a := compile(t, newLister(), v1alpha1.WaitStep{Duration: dur(2 * time.Second)})
	status := &v1alpha1.StepStatus{Name: "pause", StartTime: &stored,
		State: map[string]string{"startedAt": exact.Format(time.RFC3339Nano)}}
	got := a.Execute(context.Background(), &steps.Input{Run: &v1alpha1.TeardownRun{}, Status: status, Now: stored.Add(2 * time.Second)})
	if got.Outcome != steps.InProgress || got.CheckAfter != 900*time.Millisecond {
		t.Errorf("2s after the stored (truncated) start: %+v, want InProgress for 900ms more", got)
	}
	got = a.Execute(context.Background(), &steps.Input{Run: &v1alpha1.TeardownRun{}, Status: status, Now: exact.Add(2 * time.Second)})
	if got.Outcome != steps.Succeeded {
		t.Errorf("2s after the exact start: %+v, want Succeeded", got)
	}
}

func targetObject() map[string]any {
	return map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "Database",
		"metadata": map[string]any{
			"name":      "db",
			"namespace": "prod",
			"labels":    map[string]any{"team": "data"},
		},
	}
}

func untilInput(policyNamespace string) *steps.Input {
	run := &v1alpha1.TeardownRun{}
	run.Name = "db-run"
	run.Spec.Target = v1alpha1.TargetObjectReference{APIVersion: "example.com/v1", Kind: "Database", Namespace: "prod", Name: "db"}
	start := metav1.NewTime(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))
	return &steps.Input{
		Run:             run,
		Status:          &v1alpha1.StepStatus{Name: "pause", StartTime: &start, Attempts: 1},
		Vars:            expr.Vars{expr.VarObject: targetObject(), expr.VarSteps: map[string]any{}, expr.VarRun: map[string]any{"name": "db-run"}},
		PolicyNamespace: policyNamespace,
		Now:             start.Add(time.Minute),
	}
}

func pod(name string, phase string) any {
	return map[string]any{
		"metadata": map[string]any{"name": name, "labels": map[string]any{"app": "db"}},
		"status":   map[string]any{"phase": phase},
	}
}

func TestExecuteUntil(t *testing.T) {
	podsByApp := v1alpha1.Lookup{
		Name: "pods", APIVersion: "v1", Kind: "Pod",
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "${object.metadata.name}"}},
	}
	tests := []struct {
		name      string
		wait      v1alpha1.WaitStep
		policyNS  string
		items     map[schema.GroupVersionKind][]any
		listErr   error
		want      steps.Result
		wantCalls []listCall
	}{
		{
			name:      "condition true",
			wait:      v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{podsByApp}},
			want:      steps.Result{Outcome: steps.Succeeded, Message: "condition met: size(pods) == 0"},
			wantCalls: []listCall{{podGVK, "prod", "app=db", wait.MaxLookupItems}},
		},
		{
			name:  "condition false",
			wait:  v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{podsByApp}},
			items: map[schema.GroupVersionKind][]any{podGVK: {pod("db-1", "Running"), pod("db-0", "Running")}},
			want: steps.Result{Outcome: steps.InProgress, CheckAfter: wait.DefaultInterval, Message: "waiting for size(pods) == 0: pods: 2 (db-0, db-1)",
				Watch: []steps.WatchTarget{{GVK: podGVK, Namespace: "prod"}}},
			wantCalls: []listCall{{podGVK, "prod", "app=db", wait.MaxLookupItems}},
		},
		{
			name: "condition false with an interval",
			wait: v1alpha1.WaitStep{Until: "pods.all(p, p.status.phase == 'Succeeded')", Interval: dur(15 * time.Second),
				Lookups: []v1alpha1.Lookup{podsByApp}},
			items: map[schema.GroupVersionKind][]any{podGVK: {pod("db-0", "Succeeded"), pod("db-1", "Running")}},
			want: steps.Result{Outcome: steps.InProgress, CheckAfter: 15 * time.Second, Message: "waiting for pods.all(p, p.status.phase == 'Succeeded'): pods: 2 (db-0, db-1)",
				Watch: []steps.WatchTarget{{GVK: podGVK, Namespace: "prod"}}},
			wantCalls: []listCall{{podGVK, "prod", "app=db", wait.MaxLookupItems}},
		},
		{
			name:      "condition over the lookup's items true",
			wait:      v1alpha1.WaitStep{Until: "pods.all(p, p.status.phase == 'Succeeded')", Lookups: []v1alpha1.Lookup{podsByApp}},
			items:     map[schema.GroupVersionKind][]any{podGVK: {pod("db-0", "Succeeded")}},
			want:      steps.Result{Outcome: steps.Succeeded, Message: "condition met: pods.all(p, p.status.phase == 'Succeeded')"},
			wantCalls: []listCall{{podGVK, "prod", "app=db", wait.MaxLookupItems}},
		},
		{
			name: "condition over the object only",
			wait: v1alpha1.WaitStep{Until: "object.metadata.labels.team == 'web'", Interval: dur(time.Minute)},
			want: steps.Result{Outcome: steps.InProgress, CheckAfter: time.Minute, Message: "waiting for object.metadata.labels.team == 'web'"},
		},
		{
			name: "selector with several interpolations and expressions",
			wait: v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "pods", APIVersion: "v1", Kind: "Pod",
				Selector: &metav1.LabelSelector{
					MatchLabels: map[string]string{"app": "${object.metadata.name}", "team": "${object.metadata.labels.team}-x"},
					MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "role", Operator: metav1.LabelSelectorOpIn, Values: []string{"${object.metadata.name}-primary", "replica"}},
						{Key: "keep", Operator: metav1.LabelSelectorOpDoesNotExist},
					},
				},
			}}},
			want:      steps.Result{Outcome: steps.Succeeded, Message: "condition met: size(pods) == 0"},
			wantCalls: []listCall{{podGVK, "prod", "app=db,!keep,role in (db-primary,replica),team=data-x", wait.MaxLookupItems}},
		},
		{
			name:      "no selector lists everything",
			wait:      v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{podLookup("pods")}},
			want:      steps.Result{Outcome: steps.Succeeded, Message: "condition met: size(pods) == 0"},
			wantCalls: []listCall{{podGVK, "prod", "", wait.MaxLookupItems}},
		},
		{
			name: "interpolated namespace, cluster policy",
			wait: v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "pods", APIVersion: "v1", Kind: "Pod", Namespace: "${object.metadata.labels.team}-jobs"}}},
			items: map[schema.GroupVersionKind][]any{podGVK: {pod("j", "Running")}},
			want: steps.Result{Outcome: steps.InProgress, CheckAfter: wait.DefaultInterval, Message: "waiting for size(pods) == 0: pods: 1 (j)",
				Watch: []steps.WatchTarget{{GVK: podGVK, Namespace: "data-jobs"}}},
			wantCalls: []listCall{{podGVK, "data-jobs", "", wait.MaxLookupItems}},
		},
		{
			name:      "namespaced policy in its own namespace",
			policyNS:  "prod",
			wait:      v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{podsByApp}},
			want:      steps.Result{Outcome: steps.Succeeded, Message: "condition met: size(pods) == 0"},
			wantCalls: []listCall{{podGVK, "prod", "app=db", wait.MaxLookupItems}},
		},
		{
			name:     "namespaced policy naming its own namespace",
			policyNS: "prod",
			wait: v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "pods", APIVersion: "v1", Kind: "Pod", Namespace: "${object.metadata.namespace}"}}},
			want:      steps.Result{Outcome: steps.Succeeded, Message: "condition met: size(pods) == 0"},
			wantCalls: []listCall{{podGVK, "prod", "", wait.MaxLookupItems}},
		},
		{
			name:     "namespaced policy looking in another namespace",
			policyNS: "prod",
			wait: v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "pods", APIVersion: "v1", Kind: "Pod", Namespace: "kube-system"}}},
			want: steps.Result{Outcome: steps.Failed, Retryable: false,
				Message: `lookup pods: refused: a TeardownPolicy may look only in its own namespace "prod", not "kube-system"`},
		},
		{
			name:     "namespaced policy looking up a cluster-scoped kind",
			policyNS: "prod",
			wait: v1alpha1.WaitStep{Until: "size(nss) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "nss", APIVersion: "v1", Kind: "Namespace"}}},
			want: steps.Result{Outcome: steps.Failed, Retryable: false,
				Message: "lookup nss: refused: a TeardownPolicy may not look up cluster-scoped Namespace"},
		},
		{
			name: "cluster policy looking up a cluster-scoped kind",
			wait: v1alpha1.WaitStep{Until: "size(nss) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "nss", APIVersion: "v1", Kind: "Namespace", Namespace: "ignored",
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"owner": "${object.metadata.name}"}}}}},
			items: map[schema.GroupVersionKind][]any{namespaceGVK: {map[string]any{"metadata": map[string]any{"name": "db-ns"}}}},
			want: steps.Result{Outcome: steps.InProgress, CheckAfter: wait.DefaultInterval, Message: "waiting for size(nss) == 0: nss: 1 (db-ns)",
				Watch: []steps.WatchTarget{{GVK: namespaceGVK}}},
			wantCalls: []listCall{{namespaceGVK, "", "owner=db", wait.MaxLookupItems}},
		},
		{
			name: "two lookups",
			wait: v1alpha1.WaitStep{Until: "size(pods) + size(deploys) == 0", Lookups: []v1alpha1.Lookup{
				podsByApp,
				{Name: "deploys", APIVersion: "apps/v1", Kind: "Deployment", Namespace: "other"},
			}},
			items: map[schema.GroupVersionKind][]any{deployGVK: {map[string]any{"metadata": map[string]any{"name": "web", "namespace": "other"}}}},
			want: steps.Result{Outcome: steps.InProgress, CheckAfter: wait.DefaultInterval, Message: "waiting for size(pods) + size(deploys) == 0: pods: 0; deploys: 1 (web)",
				Watch: []steps.WatchTarget{{GVK: podGVK, Namespace: "prod"}, {GVK: deployGVK, Namespace: "other"}}},
			wantCalls: []listCall{
				{podGVK, "prod", "app=db", wait.MaxLookupItems},
				{deployGVK, "other", "", wait.MaxLookupItems},
			},
		},
		{
			name:      "lister error is retryable",
			wait:      v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{podsByApp}},
			listErr:   errors.New("connection refused"),
			want:      steps.Result{Outcome: steps.Failed, Retryable: true, Message: "lookup pods: connection refused"},
			wantCalls: []listCall{{podGVK, "prod", "app=db", wait.MaxLookupItems}},
		},
		{
			name: "kind not served is retryable",
			wait: v1alpha1.WaitStep{Until: "size(things) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "things", APIVersion: "example.com/v9", Kind: "Thing"}}},
			want: steps.Result{Outcome: steps.Failed, Retryable: true,
				Message: `lookup things: no matches for kind "Thing" in version "example.com/v9"`},
		},
		{
			name:    "too many objects",
			wait:    v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{podsByApp}},
			listErr: wait.ErrTooMany,
			want: steps.Result{Outcome: steps.Failed, Retryable: false,
				Message: `lookup pods: refused: more than 1000 Pod match "app=db"`},
			wantCalls: []listCall{{podGVK, "prod", "app=db", wait.MaxLookupItems}},
		},
		{
			name:    "too many objects, wrapped",
			wait:    v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{podLookup("pods")}},
			listErr: fmt.Errorf("listing pods: %w", wait.ErrTooMany),
			want: steps.Result{Outcome: steps.Failed, Retryable: false,
				Message: `lookup pods: refused: more than 1000 Pod match ""`},
			wantCalls: []listCall{{podGVK, "prod", "", wait.MaxLookupItems}},
		},
		{
			name: "rendered label value is not a valid label",
			wait: v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "pods", APIVersion: "v1", Kind: "Pod",
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "${object.metadata.name} x"}}}}},
			want: steps.Result{Outcome: steps.Failed, Retryable: false,
				Message: `lookup pods: refused: selector: values[0][app]: Invalid value: "db x": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`},
		},
		{
			name: "selector that cannot be rendered",
			wait: v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "pods", APIVersion: "v1", Kind: "Pod",
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "${object.metadata.labels.owner}"}}}}},
			want: steps.Result{Outcome: steps.Failed, Retryable: true,
				Message: `lookup pods: selector.matchLabels[app]: evaluating "object.metadata.labels.owner": no such key: owner`},
		},
		{
			name: "namespace that cannot be rendered",
			wait: v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "pods", APIVersion: "v1", Kind: "Pod", Namespace: "${object.spec.ns}"}}},
			want: steps.Result{Outcome: steps.Failed, Retryable: true,
				Message: `lookup pods: namespace: evaluating "object.spec.ns": no such key: spec`},
		},
		{
			name:  "evaluation error is checked again",
			wait:  v1alpha1.WaitStep{Until: "pods.all(p, p.status.ready)", Lookups: []v1alpha1.Lookup{podsByApp}},
			items: map[schema.GroupVersionKind][]any{podGVK: {pod("db-0", "Running")}},
			want: steps.Result{Outcome: steps.InProgress, CheckAfter: wait.DefaultInterval,
				Message: `until: evaluating "pods.all(p, p.status.ready)": no such key: ready; pods: 1 (db-0)`,
				Watch:   []steps.WatchTarget{{GVK: podGVK, Namespace: "prod"}}},
			wantCalls: []listCall{{podGVK, "prod", "app=db", wait.MaxLookupItems}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lister := newLister()
			if tt.items != nil {
				lister.items = tt.items
			}
			lister.listErr = tt.listErr
			a := compile(t, lister, tt.wait)
			in := untilInput(tt.policyNS)
			got := a.Execute(context.Background(), in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Execute =\n%+v\nwant\n%+v", got, tt.want)
			}
			if !reflect.DeepEqual(lister.calls, tt.wantCalls) {
				t.Errorf("List calls =\n%+v\nwant\n%+v", lister.calls, tt.wantCalls)
			}
			// The input is read-only: lookups must not be bound into the caller's Vars.
			if _, ok := in.Vars["pods"]; ok {
				t.Errorf("Execute wrote a lookup into Input.Vars")
			}
		})
	}
}

// Each execution lists afresh: a condition that was false becomes true once the objects go.
func TestExecuteUntilRelists(t *testing.T) {
	lister := newLister()
	lister.items[podGVK] = []any{pod("db-0", "Running")}
	a := compile(t, lister, v1alpha1.WaitStep{Until: "size(pods) == 0", Lookups: []v1alpha1.Lookup{podLookup("pods")}})
	if got := a.Execute(context.Background(), untilInput("")); got.Outcome != steps.InProgress {
		t.Fatalf("first Execute = %+v, want InProgress", got)
	}
	lister.items[podGVK] = nil
	got := a.Execute(context.Background(), untilInput(""))
	if want := (steps.Result{Outcome: steps.Succeeded, Message: "condition met: size(pods) == 0"}); !reflect.DeepEqual(got, want) {
		t.Errorf("second Execute = %+v, want %+v", got, want)
	}
	if len(lister.calls) != 2 {
		t.Errorf("List called %d times, want 2", len(lister.calls))
	}
}

// A waiting step says what its lookups found, a few names at most: the status of a run in
// flight shows what holds it up, and a step that times out quotes it in its failure.
func TestExecuteUntilSaysWhatItFound(t *testing.T) {
	named := func(ns, name string) any {
		return map[string]any{"metadata": map[string]any{"name": name, "namespace": ns}}
	}
	tests := map[string]struct {
		lookup v1alpha1.Lookup
		items  []any
		// clusterTarget: the run's target is cluster-scoped, so a lookup naming no namespace
		// lists every namespace.
		clusterTarget bool
		want          string
	}{
		"nothing found": {podLookup("pods"), nil, false, "waiting for size(pods) > 0: pods: 0"},
		"names sorted, in the lookup's namespace": {podLookup("pods"),
			[]any{named("prod", "db-2"), named("prod", "db-0"), named("prod", "db-1")}, false,
			"waiting for size(pods) > 0: pods: 3 (db-0, db-1, db-2)"},
		"a few names, then how many more": {podLookup("pods"),
			[]any{named("prod", "e"), named("prod", "d"), named("prod", "c"), named("prod", "b"), named("prod", "a")}, false,
			"waiting for size(pods) > 0: pods: 5 (a, b, c and 2 more)"},
		"every namespace: namespace/name": {podLookup("pods"), []any{named("b", "x"), named("a", "y")}, true,
			"waiting for size(pods) > 0: pods: 2 (a/y, b/x)"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			lister := newLister()
			lister.items[podGVK] = tt.items
			// size(pods) > 0 with what is found, or false, so that the step waits either way.
			until := "size(pods) > 0 && size(pods) > 99"
			a := compile(t, lister, v1alpha1.WaitStep{Until: until, Lookups: []v1alpha1.Lookup{tt.lookup}})
			in := untilInput("")
			if tt.clusterTarget {
				in.Run.Spec.Target.Namespace = ""
			}
			got := a.Execute(context.Background(), in)
			want := strings.Replace(tt.want, "size(pods) > 0", until, 1)
			if got.Outcome != steps.InProgress || got.Message != want {
				t.Errorf("Execute = %v %q, want InProgress %q", got.Outcome, got.Message, want)
			}
		})
	}
}
