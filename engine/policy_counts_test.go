package engine

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

func TestCountRuns(t *testing.T) {
	now := time.Unix(10_000, 0)
	run := func(age time.Duration, phase v1alpha1.RunPhase, fp v1alpha1.FailurePolicy) v1alpha1.TeardownRun {
		return v1alpha1.TeardownRun{
			ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec:       v1alpha1.TeardownRunSpec{Pipeline: v1alpha1.Pipeline{FailurePolicy: fp}},
			Status:     v1alpha1.TeardownRunStatus{Phase: phase},
		}
	}
	const after = time.Minute
	tests := []struct {
		name string
		runs []v1alpha1.TeardownRun
		want runCounts
	}{
		{"none", nil, runCounts{}},
		{"young running", []v1alpha1.TeardownRun{run(10*time.Second, v1alpha1.RunRunning, "")},
			runCounts{active: 1, nextStuck: 50*time.Second + stuckMargin}},
		{"old running", []v1alpha1.TeardownRun{run(2*time.Minute, v1alpha1.RunRunning, "")}, runCounts{active: 1, stuck: 1}},
		{"pending counts as active", []v1alpha1.TeardownRun{run(0, "", "")}, runCounts{active: 1, nextStuck: after + stuckMargin}},
		{"old failed retaining", []v1alpha1.TeardownRun{run(2*time.Minute, v1alpha1.RunFailed, v1alpha1.FailurePolicyRetain)}, runCounts{stuck: 1}},
		{"young failed retaining", []v1alpha1.TeardownRun{run(30*time.Second, v1alpha1.RunFailed, "")}, runCounts{nextStuck: 30*time.Second + stuckMargin}},
		{"failed releasing", []v1alpha1.TeardownRun{run(2*time.Minute, v1alpha1.RunFailed, v1alpha1.FailurePolicyRelease)}, runCounts{}},
		{"succeeded and abandoned", []v1alpha1.TeardownRun{run(2*time.Minute, v1alpha1.RunSucceeded, ""), run(2*time.Minute, v1alpha1.RunAbandoned, "")}, runCounts{}},
		{"the soonest crossing", []v1alpha1.TeardownRun{run(10*time.Second, v1alpha1.RunRunning, ""), run(40*time.Second, v1alpha1.RunRunning, "")},
			runCounts{active: 2, nextStuck: 20*time.Second + stuckMargin}},
	}
	for _, tt := range tests {
		if got := countRuns(tt.runs, now, after); got != tt.want {
			t.Errorf("%s: countRuns = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestMatchErrors(t *testing.T) {
	m := newPolicyObjects()
	p, q := policy.Key{Kind: policy.KindNamespaced, Namespace: "ns", Name: "p"}, policy.Key{Kind: policy.KindCluster, Name: "q"}
	a := NewTargetKey(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "ns", "a")
	b := a
	b.Name = "b"
	steps := []struct {
		do      func() bool
		changed bool
		countP  int
	}{
		{func() bool { return m.set(p, a, true) }, true, 1},
		{func() bool { return m.set(p, a, true) }, false, 1}, // already counted: no event again
		{func() bool { return m.set(p, b, true) }, true, 2},
		{func() bool { return m.set(q, a, true) }, true, 2},
		{func() bool { return m.set(p, b, false) }, true, 1},
		{func() bool { return m.set(p, b, false) }, false, 1},
	}
	for i, s := range steps {
		if got := s.do(); got != s.changed {
			t.Errorf("step %d: changed = %v, want %v", i, got, s.changed)
		}
		if got := m.count(p); got != s.countP {
			t.Errorf("step %d: count = %d, want %d", i, got, s.countP)
		}
	}
	if got := m.forgetObject(a); len(got) != 2 || got[0] != q || got[1] != p {
		t.Errorf("forgetObject = %v, want both policies, sorted", got)
	}
	if m.count(p) != 0 || m.count(q) != 0 {
		t.Error("a gone object is counted no more")
	}
	m.set(p, a, true)
	m.forgetPolicy(p)
	if m.count(p) != 0 {
		t.Error("a gone policy is forgotten")
	}
}
