// Package fence keeps a replica that may have lost its leader election lease from acting.
//
// Leader election hands the lease to a standby once the leader has not renewed it for the lease
// duration (15 s). A leader that was paused (SIGSTOP, a frozen VM, a long GC pause) does not know
// that when it resumes: its workers carry on where they stopped, and would write to the API
// server and call external systems until its renew loop notices, moments later. The fence closes
// that window by time: every renewal of the lease is recorded, and side effects (API writes,
// http steps) are refused once the last renewal is older than the renew deadline (10 s), which is
// shorter than the lease duration, so the refusal starts before a standby can take over.
package fence

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lock is a leader election lock that records when this replica last renewed the lease.
type Lock struct {
	resourcelock.Interface
	maxAge  time.Duration
	renewed atomic.Pointer[time.Time]
	now     func() time.Time // time.Now; tests replace it
}

// New wraps inner; Check fails once the lease was last renewed more than maxAge ago.
func New(inner resourcelock.Interface, maxAge time.Duration) *Lock {
	return &Lock{Interface: inner, maxAge: maxAge, now: time.Now}
}

// Create records a lease acquired by creating it.
func (l *Lock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.record(r, func() error { return l.Interface.Create(ctx, r) })
}

// Update records a lease acquired or renewed.
func (l *Lock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.record(r, func() error { return l.Interface.Update(ctx, r) })
}

// record runs a write of the lease and, when it holds the lease for this replica, records the
// time the write was sent (not answered: the lease counts from the renew time it carries).
func (l *Lock) record(r resourcelock.LeaderElectionRecord, write func() error) error {
	sent := l.now()
	if err := write(); err != nil {
		return err
	}
	if r.HolderIdentity == l.Identity() {
		l.renewed.Store(&sent)
	}
	return nil
}

// ExpiredError says the lease was not renewed recently enough to act.
type ExpiredError struct {
	// Age is the time since the last renewal; zero when the lease was never held.
	Age, MaxAge time.Duration
}

func (e *ExpiredError) Error() string {
	if e.Age == 0 {
		return "not acting: this replica does not hold the leader election lease"
	}
	return fmt.Sprintf("not acting: this replica last renewed its leader election lease %s ago (more than %s): another replica may hold it now",
		e.Age.Round(time.Millisecond), e.MaxAge)
}

// Check returns nil while this replica renewed the lease within maxAge, else an *ExpiredError.
// A nil Lock (no leader election) always allows.
func (l *Lock) Check() error {
	if l == nil {
		return nil
	}
	t := l.renewed.Load()
	if t == nil {
		return &ExpiredError{MaxAge: l.maxAge}
	}
	if age := l.now().Sub(*t); age > l.maxAge {
		return &ExpiredError{Age: age, MaxAge: l.maxAge}
	}
	return nil
}
