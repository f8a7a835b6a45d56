package engine

import (
	"sync"
	"time"

	"github.com/teardown-dev/teardown-operator/engine/watch"
)

// The dynamic informers (target kinds, and the kinds wait steps and deletion guards look up) send
// every event to a router, which passes it to the handler each concern registered: the target
// reconciler's, the policy counts', the run reconciler's, the deletion guards' and the lookups'.
// Each handler decides alone what work the event means for its concern, and queues it; none knows
// of the others.

// watchHandler is one concern's reaction to an event of the dynamic informers. It runs on the
// informer's goroutine: it must not block, and only queues work.
type watchHandler interface {
	handle(ev watch.Event)
}

// router passes each event to every registered handler, in the order they registered.
type router struct {
	mu       sync.RWMutex
	handlers []watchHandler
}

// register adds handlers; the engine registers them while it sets up its controllers, before any
// informer runs.
func (r *router) register(h ...watchHandler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers = append(r.handlers, h...)
}

// route is the watch manager's handler.
func (r *router) route(ev watch.Event) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, h := range r.handlers {
		h.handle(ev)
	}
}

// queue is where a handler puts the work it finds: a controller's queue (a queueRef).
type queue[T comparable] interface {
	Add(item T)
	AddAfter(item T, d time.Duration)
}
