package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

func TestLogTransitions(t *testing.T) {
	base := &v1alpha1.TeardownRun{Spec: v1alpha1.TeardownRunSpec{
		PolicyRef: v1alpha1.PolicyReference{Kind: "TeardownPolicy", Namespace: "ns", Name: "p"},
		Target:    v1alpha1.TargetObjectReference{Kind: "ConfigMap", Namespace: "ns", Name: "t"},
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
		{"nothing new", at(v1alpha1.RunRunning), at(v1alpha1.RunRunning), nil},
		{"attempt failed", at(v1alpha1.RunRunning, v1alpha1.StepStatus{Name: "b", Phase: v1alpha1.StepRunning}),
			at(v1alpha1.RunRunning, v1alpha1.StepStatus{Name: "b", Phase: v1alpha1.StepRunning, RetryTime: &retry, Message: "503"}),
			[]string{`"msg"="step attempt failed; retrying"|"step"="b"`}},
		{"step and run failed", at(v1alpha1.RunRunning, v1alpha1.StepStatus{Name: "b", Phase: v1alpha1.StepRunning}),
			at(v1alpha1.RunFailed, v1alpha1.StepStatus{Name: "b", Phase: v1alpha1.StepFailed, Message: "403"}),
			[]string{`"msg"="step failed"|"step"="b"|"message"="403"`, `"msg"="teardown ended"|"phase"="Failed"`}},
		{"retried", at(v1alpha1.RunFailed), retried(at(v1alpha1.RunRunning)), []string{`"msg"="teardown retried"|"fromStep"="b"`}},
		{"retried and done in one pass", at(v1alpha1.RunFailed), retried(at(v1alpha1.RunSucceeded)),
			[]string{`"msg"="teardown retried"`, `"msg"="teardown ended"|"phase"="Succeeded"`}},
		{"abandoned after failure", at(v1alpha1.RunFailed), at(v1alpha1.RunAbandoned), []string{`"msg"="teardown ended"|"phase"="Abandoned"`}},
	}
	for _, tt := range tests {
		var lines []string
		log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
		logTransitions(logr.NewContext(context.Background(), log), tt.before, tt.after)
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
