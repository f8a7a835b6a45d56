package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

func TestLogTransitions(t *testing.T) {
	base := &v1alpha1.TeardownRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run-t"}, Spec: v1alpha1.TeardownRunSpec{
		PolicyRef: v1alpha1.PolicyReference{Kind: "TeardownPolicy", Namespace: "ns", Name: "p"},
		Target:    v1alpha1.TargetObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "t", UID: "u-1"},
	}}
	at := func(phase v1alpha1.RunPhase, steps ...v1alpha1.StepStatus) *v1alpha1.TeardownRun {
		r := base.DeepCopy()
		r.Status.Phase, r.Status.Steps = phase, steps
		return r
	}
	retry := metav1.NewMicroTime(metav1.Now().Time)
	retried := func(r *v1alpha1.TeardownRun) *v1alpha1.TeardownRun {
		r.Status.Retries, r.Status.LastRetry = 1, &v1alpha1.RunRetry{FromStep: "b"}
		return r
	}
	tests := []struct {
		name          string
		before, after *v1alpha1.TeardownRun
		want          []string
	}{
		{"start", at(""), at(v1alpha1.RunRunning), []string{`"msg"="teardown started"`}},
		{"started and ended in one pass: the end alone", at(""), at(v1alpha1.RunSucceeded), []string{`"msg"="teardown ended"|"phase"="Succeeded"`}},
		{"nothing new", at(v1alpha1.RunRunning), at(v1alpha1.RunRunning), nil},
		{"attempt failed", at(v1alpha1.RunRunning, v1alpha1.StepStatus{Name: "b", Phase: v1alpha1.StepRunning}),
			at(v1alpha1.RunRunning, v1alpha1.StepStatus{Name: "b", Phase: v1alpha1.StepRunning, RetryTime: &retry, Message: "503"}),
			[]string{`"msg"="step attempt failed; retrying"|"step"="b"`}},
		{"step and run failed", at(v1alpha1.RunRunning, v1alpha1.StepStatus{Name: "b", Phase: v1alpha1.StepRunning}),
			at(v1alpha1.RunFailed, v1alpha1.StepStatus{Name: "b", Phase: v1alpha1.StepFailed, Message: "403"}),
			[]string{`"msg"="step failed"|"step"="b"|"message"="403"`,
				`"msg"="teardown ended"|"phase"="Failed"|"targetAPIVersion"="v1"|"targetUID"="u-1"|"run"="ns/run-t"|"steps"=[{"name"="b"|"phase"="Failed"`}},
		{"retried", at(v1alpha1.RunFailed), retried(at(v1alpha1.RunRunning)), []string{`"msg"="teardown retried"|"fromStep"="b"`}},
		{"retried and failed again in one pass", at(v1alpha1.RunFailed), retried(at(v1alpha1.RunFailed)),
			[]string{`"msg"="teardown retried"`, `"msg"="teardown ended"|"phase"="Failed"`}},
		{"retried and done in one pass", at(v1alpha1.RunFailed), retried(at(v1alpha1.RunSucceeded)),
			[]string{`"msg"="teardown retried"`, `"msg"="teardown ended"|"phase"="Succeeded"`}},
		{"abandoned after failure", at(v1alpha1.RunFailed), at(v1alpha1.RunAbandoned), []string{`"msg"="teardown ended"|"phase"="Abandoned"`}},
	}
	for _, tt := range tests {
		var lines []string
		log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
		logTransitions(logr.NewContext(context.Background(), log), tt.before, tt.after, true)
		if len(lines) != len(tt.want) {
			t.Errorf("%s: logged %q, want %d lines", tt.name, lines, len(tt.want))
			continue
		}
		for i, w := range tt.want {
			for _, part := range append(strings.Split(w, "|"), `"target"="ConfigMap ns/t"`, `"policy"="TeardownPolicy/ns/p"`) {
				if !strings.Contains(lines[i], part) {
					t.Errorf("%s: line %q, want %q", tt.name, lines[i], part)
				}
			}
		}
	}
}

func TestPassReportsEnded(t *testing.T) {
	key := policy.Key{Kind: policy.KindNamespaced, Namespace: "ns", Name: "p"}
	h := newTeardownHistory(func(policy.Key, time.Duration) {})
	r := passReports{history: h}
	run := func(phase v1alpha1.RunPhase) *v1alpha1.TeardownRun {
		return &v1alpha1.TeardownRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run-t"}, Spec: v1alpha1.TeardownRunSpec{
			PolicyRef: v1alpha1.PolicyReference{Kind: "TeardownPolicy", Namespace: "ns", Name: "p"},
			Target:    v1alpha1.TargetObjectReference{Kind: "ConfigMap", Namespace: "ns", Name: "t"},
		}, Status: v1alpha1.TeardownRunStatus{Phase: phase, Message: "all steps done"}}
	}
	retried := run(v1alpha1.RunFailed)
	retried.Status.Retries = 1
	r.ended(run(v1alpha1.RunRunning), run(v1alpha1.RunRunning), true, false)  // goes on
	r.ended(run(""), run(v1alpha1.RunSucceeded), false, false)                // done at once, not kept
	r.ended(run(v1alpha1.RunRunning), run(v1alpha1.RunFailed), true, false)   // failed, kept
	r.ended(run(v1alpha1.RunFailed), run(v1alpha1.RunFailed), true, false)    // no change
	r.ended(run(v1alpha1.RunFailed), retried, true, false)                    // retried, failed again in one pass
	r.ended(run(v1alpha1.RunFailed), run(v1alpha1.RunAbandoned), true, false) // abandoned after
	r.ended(run(v1alpha1.RunRunning), run(v1alpha1.RunSucceeded), true, true) // a hand-made run, rejected
	d, _ := h.take(key, "")
	if d == nil || d.counts != (v1alpha1.TeardownCounts{Succeeded: 1, Failed: 2, Abandoned: 1}) {
		t.Fatalf("took %+v", d)
	}
	if runs := [4]string{d.recent[0].Run, d.recent[1].Run, d.recent[2].Run, d.recent[3].Run}; runs != [4]string{"", "ns/run-t", "ns/run-t", "ns/run-t"} {
		t.Errorf("recorded runs %q: a teardown not kept names no run", runs)
	}
	if d.recent[0].Message != "all steps done" || d.recent[0].Target.Name != "t" {
		t.Errorf("recent %+v", d.recent[0])
	}
}
