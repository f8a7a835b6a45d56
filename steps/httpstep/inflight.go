package httpstep

import (
	"errors"
	"sync"
	"time"
)

// errBusy is returned when as many requests as allowed are in flight.
var errBusy = errors.New("too many requests in flight")

// forgetAfter is how long a finished request's outcome is kept for a reconcile that never came
// (the run was deleted or its step timed out meanwhile).
const forgetAfter = 10 * time.Minute

// calls runs requests outside reconciles, so that a slow server holds a goroutine, not a worker.
// A reconcile starts a request and waits for it a short while; if it is not done by then, the
// reconcile returns and the request's end wakes the run, whose next reconcile takes the outcome.
type calls struct {
	mu        sync.Mutex
	byKey     map[string]*call
	slots     chan struct{}
	lastSweep time.Time
}

type call struct {
	done     chan struct{}
	finished time.Time
	// waiting is true while a reconcile waits for the call; the call's end wakes the run only
	// when no one waits, so a fast request costs no second reconcile.
	waiting bool
	req     *request
	out     *exchange
}

func newCalls(max int) *calls {
	return &calls{byKey: map[string]*call{}, slots: make(chan struct{}, max)}
}

// get returns the call under key, or nil.
func (c *calls) get(key string) *call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byKey[key]
}

// start runs do in a goroutine under key. wake is called when it ends unless a reconcile is
// waiting for it.
func (c *calls) start(key string, req *request, do func() *exchange, wake func()) (*call, error) {
	select {
	case c.slots <- struct{}{}:
	default:
		return nil, errBusy
	}
	// The caller waits for the call right away: marked so, a call that ends before the wait
	// begins wakes no one.
	cl := &call{done: make(chan struct{}), req: req, waiting: true}
	c.mu.Lock()
	c.sweep()
	c.byKey[key] = cl
	c.mu.Unlock()
	go func() {
		out := do()
		<-c.slots
		c.mu.Lock()
		cl.out, cl.finished = out, time.Now()
		close(cl.done)
		waiting := cl.waiting
		c.mu.Unlock()
		if !waiting {
			wake()
		}
	}()
	return cl, nil
}

// wait waits at most d for cl and reports whether it has ended. It outlasts ctx: when the
// operator stops, the reconcile still takes an answer that comes within d, and its pass records
// it (see the engine's recording), instead of leaving the request to be sent again by the next
// replica.
func (c *calls) wait(cl *call, d time.Duration) bool {
	c.mu.Lock()
	cl.waiting = true
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-cl.done:
	case <-t.C:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cl.waiting = false
	return cl.out != nil
}

// take removes the call under key once its outcome is used.
func (c *calls) take(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byKey, key)
}

// inFlight counts the requests running now.
func (c *calls) inFlight() int { return len(c.slots) }

// sweep forgets outcomes no reconcile took. The caller holds mu.
func (c *calls) sweep() {
	now := time.Now()
	if now.Sub(c.lastSweep) < time.Minute {
		return
	}
	c.lastSweep = now
	for k, cl := range c.byKey {
		if cl.out != nil && now.Sub(cl.finished) > forgetAfter {
			delete(c.byKey, k)
		}
	}
}
