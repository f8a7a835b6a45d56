package engine

import (
	"context"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// inheritMargin widens the window of deletions a predecessor may have handled past the moment this
// process began to lead, for an API server's clock ahead of this process's (a deletionTimestamp is
// the API server's). Kept short: every deletion in the window is read from the API server first.
const inheritMargin = time.Second

// leadership records when this process began to act on the cluster: the engine's controllers
// start once it leads. A deletion that began before then may have been handled by a predecessor
// (a replica that stopped, an earlier leader), whose writes this process's caches can miss: a
// cache served from the past behind a lagging API server, or a standby's cache that lagged.
type leadership struct {
	since atomic.Int64 // Unix nanoseconds; 0 until this process leads
}

// Start marks the moment this process began to lead.
func (l *leadership) Start(ctx context.Context) error {
	l.since.Store(time.Now().UnixNano())
	<-ctx.Done()
	return nil
}

// NeedLeaderElection says that Start runs only once this process leads.
func (l *leadership) NeedLeaderElection() bool { return true }

// predates reports whether a deletion that began at t may have been handled by a predecessor.
// Until Start ran, every deletion may.
func (l *leadership) predates(t *metav1.Time) bool {
	if t == nil {
		return false
	}
	since := l.since.Load()
	return since == 0 || t.Time.Before(time.Unix(0, since).Add(inheritMargin))
}
