package engine

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// teardown is a teardown of the ConfigMap shop/<name> that ended with outcome.
func teardown(name string, outcome v1alpha1.RunPhase) v1alpha1.RecentTeardown {
	return v1alpha1.RecentTeardown{Target: v1alpha1.TargetObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: name},
		Outcome: outcome, CompletionTime: metav1.Unix(1, 0)}
}

func names(ts []v1alpha1.RecentTeardown) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Target.Name)
	}
	return out
}

func TestTeardownHistory(t *testing.T) {
	key := policy.Key{Kind: policy.KindNamespaced, Namespace: "shop", Name: "p"}
	now := time.Unix(1000, 0)
	var queued []time.Duration
	h := newTeardownHistory(func(k policy.Key, after time.Duration) { queued = append(queued, after) })
	h.now = func() time.Time { return now }

	if d, wait := h.take(key, "u1"); d != nil || wait != 0 {
		t.Fatalf("nothing ended: took %v, wait %v", d, wait)
	}
	h.ended(key, "u1", teardown("a", v1alpha1.RunSucceeded))
	h.ended(key, "u1", teardown("b", v1alpha1.RunFailed))
	if fmt.Sprint(queued) != "[0s 0s]" {
		t.Errorf("never written: the status write is queued at once, got %v", queued)
	}
	d, _ := h.take(key, "u1")
	if d.counts.Succeeded != 1 || d.counts.Failed != 1 || fmt.Sprint(names(d.recent)) != "[a b]" {
		t.Fatalf("took %+v", d)
	}
	// One more ends between the take and the write: it stays for the next write.
	h.ended(key, "u1", teardown("c", v1alpha1.RunSucceeded))
	h.written(key, d)
	now = now.Add(time.Second)
	h.ended(key, "u1", teardown("d", v1alpha1.RunAbandoned))
	if last := queued[len(queued)-1]; last != historyEvery-time.Second {
		t.Errorf("written a second ago: the next write queued after %v, want %v", last, historyEvery-time.Second)
	}
	if d, wait := h.take(key, "u1"); d != nil || wait != historyEvery-time.Second {
		t.Errorf("written a second ago: took %v, wait %v; want nothing until %v", d, wait, historyEvery-time.Second)
	}
	now = now.Add(historyEvery)
	d, wait := h.take(key, "u1")
	if wait != 0 || d.counts != (v1alpha1.TeardownCounts{Succeeded: 1, Abandoned: 1}) || fmt.Sprint(names(d.recent)) != "[c d]" {
		t.Fatalf("after the window: took %+v (wait %v), want c and d", d, wait)
	}
	h.written(key, d)
	if d, _ := h.take(key, "u1"); d != nil {
		t.Errorf("all written: took %+v", d)
	}

	// A burst keeps the counts of all and the newest maxRecent.
	now = now.Add(historyEvery)
	for i := range 25 {
		h.ended(key, "u1", teardown(fmt.Sprint(i), v1alpha1.RunSucceeded))
	}
	d, _ = h.take(key, "u1")
	if d.counts.Succeeded != 25 || len(d.recent) != maxRecent || d.recent[maxRecent-1].Target.Name != "24" {
		t.Errorf("a burst of 25: took %d succeeded, recent %v", d.counts.Succeeded, names(d.recent))
	}
	h.forget(key)
	if d, _ := h.take(key, "u1"); d != nil {
		t.Error("a policy forgotten still has history to write")
	}

	// A policy deleted and made again under its name: the new one's history starts afresh, and
	// a run of the old one that ends late counts for neither.
	now = now.Add(historyEvery)
	h.ended(key, "u1", teardown("old", v1alpha1.RunSucceeded))
	if d, _ := h.take(key, "u2"); d != nil {
		t.Errorf("the new policy took the old one's history: %v", names(d.recent))
	}
	h.ended(key, "u2", teardown("new", v1alpha1.RunFailed))
	d, _ = h.take(key, "u2")
	h.ended(key, "u1", teardown("old-late", v1alpha1.RunSucceeded)) // between the take and the write
	h.written(key, d)
	if d == nil || fmt.Sprint(names(d.recent)) != "[new]" || d.counts != (v1alpha1.TeardownCounts{Failed: 1}) {
		t.Errorf("the new policy's history: %+v", d)
	}
	now = now.Add(historyEvery)
	h.ended(key, "u2", teardown("newer", v1alpha1.RunSucceeded))
	if d, _ := h.take(key, "u2"); d == nil || fmt.Sprint(names(d.recent)) != "[newer]" || d.counts != (v1alpha1.TeardownCounts{Succeeded: 1}) {
		t.Errorf("after the write, the new policy's history: %+v", d)
	}
}

func TestWithHistory(t *testing.T) {
	old := v1alpha1.TeardownPolicyStatus{Teardowns: v1alpha1.TeardownCounts{Succeeded: 7, Failed: 1},
		RecentTeardowns: []v1alpha1.RecentTeardown{teardown("y", v1alpha1.RunFailed), teardown("x", v1alpha1.RunSucceeded)}}
	for name, tc := range map[string]struct {
		delta      *historyDelta
		wantCounts v1alpha1.TeardownCounts
		wantRecent string
	}{
		"nothing ended": {nil, old.Teardowns, "[y x]"},
		"two ended, newest first before the old": {&historyDelta{counts: v1alpha1.TeardownCounts{Succeeded: 1, Cancelled: 1},
			recent: []v1alpha1.RecentTeardown{teardown("a", v1alpha1.RunSucceeded), teardown("b", v1alpha1.RunCancelled)}, seq: 2},
			v1alpha1.TeardownCounts{Succeeded: 8, Failed: 1, Cancelled: 1}, "[b a y x]"},
		"more than fit: the oldest go": {&historyDelta{counts: v1alpha1.TeardownCounts{Succeeded: 9},
			recent: []v1alpha1.RecentTeardown{teardown("1", "Succeeded"), teardown("2", "Succeeded"), teardown("3", "Succeeded"), teardown("4", "Succeeded"),
				teardown("5", "Succeeded"), teardown("6", "Succeeded"), teardown("7", "Succeeded"), teardown("8", "Succeeded"), teardown("9", "Succeeded")}, seq: 9},
			v1alpha1.TeardownCounts{Succeeded: 16, Failed: 1}, "[9 8 7 6 5 4 3 2 1 y]"},
	} {
		t.Run(name, func(t *testing.T) {
			st := withHistory(*old.DeepCopy(), tc.delta)
			if st.Teardowns != tc.wantCounts || fmt.Sprint(names(st.RecentTeardowns)) != tc.wantRecent {
				t.Errorf("got %+v %v, want %+v %s", st.Teardowns, names(st.RecentTeardowns), tc.wantCounts, tc.wantRecent)
			}
		})
	}
}
