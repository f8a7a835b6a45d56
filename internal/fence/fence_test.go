package fence

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fakeLock is a resourcelock.Interface whose writes succeed or fail as told.
type fakeLock struct {
	resourcelock.Interface // unused methods panic
	fail                   error
}

func (f *fakeLock) Identity() string { return "me" }
func (f *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	return f.fail
}
func (f *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	return f.fail
}

func TestCheck(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	tests := []struct {
		name    string
		steps   func(l *Lock, f *fakeLock, clock *time.Time)
		wantErr bool
		wantAge time.Duration
	}{
		{"never held", func(*Lock, *fakeLock, *time.Time) {}, true, 0},
		{"acquired", func(l *Lock, _ *fakeLock, _ *time.Time) {
			_ = l.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
		}, false, 0},
		{"renewed within the deadline", func(l *Lock, _ *fakeLock, c *time.Time) {
			_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
			*c = c.Add(10 * time.Second)
		}, false, 0},
		{"renewed too long ago (paused)", func(l *Lock, _ *fakeLock, c *time.Time) {
			_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
			*c = c.Add(11 * time.Second)
		}, true, 11 * time.Second},
		{"a failed renewal does not count", func(l *Lock, f *fakeLock, c *time.Time) {
			_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
			*c = c.Add(8 * time.Second)
			f.fail = errors.New("conflict")
			_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
			*c = c.Add(3 * time.Second)
		}, true, 11 * time.Second},
		{"releasing the lease does not renew it", func(l *Lock, _ *fakeLock, c *time.Time) {
			_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
			*c = c.Add(9 * time.Second)
			_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: ""})
			*c = c.Add(2 * time.Second)
		}, true, 11 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := t0
			f := &fakeLock{}
			l := New(f, 10*time.Second)
			l.now = func() time.Time { return clock }
			tt.steps(l, f, &clock)
			err := l.Check()
			var exp *ExpiredError
			if (err != nil) != tt.wantErr || err != nil && (!errors.As(err, &exp) || exp.Age != tt.wantAge) {
				t.Fatalf("Check() = %v, want error %v with age %s", err, tt.wantErr, tt.wantAge)
			}
		})
	}
}

func TestNilLockAllows(t *testing.T) {
	var l *Lock
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
}
