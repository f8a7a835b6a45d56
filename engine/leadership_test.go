package engine

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLeadershipPredates: every deletion may be a predecessor's until this process leads; then
// those that began before (within the margin of the API server's clock) are.
func TestLeadershipPredates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &leadership{}
		at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(time.Now().Add(d)); return &t }
		if !l.predates(at(time.Hour)) {
			t.Error("before this process leads, a deletion should count as a predecessor's")
		}
		if l.predates(nil) {
			t.Error("no deletion predates anything")
		}
		ctx, cancel := context.WithCancel(t.Context())
		go func() { _ = l.Start(ctx) }()
		synctest.Wait()
		for _, tc := range []struct {
			offset time.Duration
			want   bool
		}{
			{-time.Hour, true},
			{-time.Second, true},
			{inheritMargin - time.Second, true},
			{inheritMargin, false},
			{time.Minute, false},
		} {
			if got := l.predates(at(tc.offset)); got != tc.want {
				t.Errorf("a deletion %s after this process began to lead: predates %v, want %v", tc.offset, got, tc.want)
			}
		}
		cancel()
		synctest.Wait()
	})
}
