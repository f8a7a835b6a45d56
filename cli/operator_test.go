package cli

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestJudgeLease(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.MicroTime { return ptr.To(metav1.NewMicroTime(now.Add(d))) }
	lease := func(holder string, duration int32, acquired, renewed *metav1.MicroTime) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "teardown-system", Name: "teardown-operator.teardown.dev"}}
		if holder != "" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		l.Spec.LeaseDurationSeconds = ptr.To(duration)
		l.Spec.AcquireTime, l.Spec.RenewTime = acquired, renewed
		return l
	}
	tests := map[string]struct {
		lease     *coordinationv1.Lease
		held      bool
		since     time.Time
		wantWords string
	}{
		"renewed within its duration":                       {lease("pod-a_1", 15, at(-time.Hour), at(-3*time.Second)), true, now.Add(-time.Hour), "running (replica pod-a_1"},
		"renewal older than its duration (a killed leader)": {lease("pod-a_1", 15, at(-time.Hour), at(-16*time.Second)), false, now.Add(-16 * time.Second), "NOT RUNNING"},
		"released on a clean stop (no holder)":              {lease("", 1, at(-time.Minute), at(-time.Minute)), false, now.Add(-time.Minute), "NOT RUNNING"},
		"never renewed":                                     {lease("", 15, nil, nil), false, time.Time{}, "no replica has ever renewed"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			st := judgeLease(tc.lease, now)
			if !st.Known || st.Held != tc.held || !st.Since.Equal(tc.since) {
				t.Fatalf("judgeLease = known %v held %v since %v; want held %v since %v", st.Known, st.Held, st.Since, tc.held, tc.since)
			}
			if st.down() == tc.held {
				t.Errorf("down() = %v with held %v", st.down(), tc.held)
			}
			if s := st.String(); !strings.Contains(s, tc.wantWords) {
				t.Errorf("String() = %q, want it to say %q", s, tc.wantWords)
			}
		})
	}
}
