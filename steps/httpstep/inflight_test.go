package httpstep

import (
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The tests of calls run in a synctest bubble: time is virtual, so a 10-minute expiry and
// a server slower than the inline wait are exact, and take no real time.

// slowCall returns a do func that answers after d, and a counter of the wakes it caused.
func slowCall(d time.Duration) (func() *exchange, func(), *atomic.Int32) {
	var wakes atomic.Int32
	do := func() *exchange { time.Sleep(d); return &exchange{} }
	return do, func() { wakes.Add(1) }, &wakes
}

func TestCallsInlineWait(t *testing.T) {
	for _, tc := range []struct {
		name        string
		server      time.Duration // how long the request takes
		inline      time.Duration // how long the reconcile waits for it
		ended       bool          // whether the wait sees it end
		waitedFor   time.Duration // how long the wait took
		wakesByThen int32         // wakes once the request ended
	}{
		{"ends within the wait: no wake", 300 * time.Millisecond, time.Second, true, 300 * time.Millisecond, 0},
		{"ends a millisecond before the wait's end", time.Second - time.Millisecond, time.Second, true, time.Second - time.Millisecond, 0},
		{"slower than the wait: the reconcile returns, the end wakes the run once", 5 * time.Second, time.Second, false, time.Second, 1},
		{"no inline wait", time.Second, 0, false, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCalls(4)
				do, wake, wakes := slowCall(tc.server)
				start := time.Now()
				cl, err := c.start("k", &request{}, do, wake)
				if err != nil {
					t.Fatal(err)
				}
				if got := c.wait(cl, tc.inline); got != tc.ended {
					t.Errorf("wait reported ended=%v, want %v", got, tc.ended)
				}
				if waited := time.Since(start); waited != tc.waitedFor {
					t.Errorf("the wait took %s, want %s", waited, tc.waitedFor)
				}
				time.Sleep(tc.server) // past the request's end
				synctest.Wait()
				if got := wakes.Load(); got != tc.wakesByThen {
					t.Errorf("%d wakes, want %d", got, tc.wakesByThen)
				}
				if got := c.get("k"); got == nil || got.out == nil {
					t.Errorf("the outcome is not kept for the next reconcile: %+v", got)
				}
				if c.inFlight() != 0 {
					t.Errorf("%d requests still in flight", c.inFlight())
				}
			})
		})
	}
}

func TestCallsBoundInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls(2)
		do, wake, _ := slowCall(time.Minute)
		for _, key := range []string{"a", "b"} {
			if _, err := c.start(key, &request{}, do, wake); err != nil {
				t.Fatalf("start %s: %v", key, err)
			}
		}
		if _, err := c.start("c", &request{}, do, wake); !errors.Is(err, errBusy) {
			t.Fatalf("a third request while two are in flight: %v, want errBusy", err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if _, err := c.start("c", &request{}, do, wake); err != nil {
			t.Fatalf("once the first two ended: %v", err)
		}
		time.Sleep(time.Minute) // let it end within the bubble
	})
}

// The wait takes no context: a reconcile cut short by the operator's shutdown still takes an
// answer that comes within the inline wait, so that its pass records it.
func TestCallsWaitOutlastsShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls(1)
		do, wake, wakes := slowCall(50 * time.Millisecond)
		cl, err := c.start("k", &request{}, do, wake)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if !c.wait(cl, 100*time.Millisecond) {
			t.Error("the answer that came within the inline wait was not taken")
		}
		if waited := time.Since(start); waited != 50*time.Millisecond {
			t.Errorf("the wait took %s, want the answer's 50ms", waited)
		}
		synctest.Wait()
		if wakes.Load() != 0 {
			t.Errorf("%d wakes for an answer taken inline", wakes.Load())
		}
	})
}

// An outcome no reconcile took (its run was deleted meanwhile) is forgotten 10 minutes after
// the request ended, at the next start a minute or more after the last sweep.
func TestCallsForgetUntakenOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls(4)
		do, wake, _ := slowCall(0)
		for _, key := range []string{"old", "recent"} {
			if _, err := c.start(key, &request{}, do, wake); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			time.Sleep(2 * time.Minute)
		}
		// old ended 4 min ago, recent 2 min ago.
		time.Sleep(forgetAfter - 4*time.Minute + time.Second)
		if _, err := c.start("trigger", &request{}, do, wake); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if c.get("old") != nil {
			t.Error("an outcome over 10 minutes old is still kept")
		}
		if c.get("recent") == nil {
			t.Error("an outcome under 10 minutes old was forgotten")
		}
		if c.get("trigger") == nil {
			t.Error("the new call is not kept")
		}
	})
}
