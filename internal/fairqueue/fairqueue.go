// Package fairqueue is a controller work queue that shares the workers between namespaces: work
// from a namespace that floods the queue (a tenant deleting thousands of objects, or a policy
// feeding itself) waits behind the work of the others instead of in front of it. It wraps
// controller-runtime's priority queue, whose ordering, de-duplication, delays and rate limits it
// keeps: an item is added at its priority less the number of items of its namespace already
// waiting, so that within a priority the namespace with less waiting goes first, and within a
// namespace items keep their order.
package fairqueue

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// Queue is a fair priority queue of items of type T, each of the namespace NamespaceOf says.
type Queue[T comparable] struct {
	priorityqueue.PriorityQueue[T]
	namespaceOf func(T) string

	mu sync.Mutex
	// waiting counts, per namespace, the items added and not yet taken; priority is what each
	// such item was added at before the namespace's share was taken off (what the controller
	// adds it back at when it requeues it), so that a requeued item does not sink further each
	// time.
	waiting  map[string]int
	priority map[T]int
}

// New returns a fair queue over a priority queue named name, with rateLimiter for
// AddRateLimited; namespaceOf names an item's namespace ("" for cluster-scoped ones: a share of
// their own).
func New[T comparable](name string, rateLimiter workqueue.TypedRateLimiter[T], namespaceOf func(T) string) *Queue[T] {
	inner := priorityqueue.New(name, func(o *priorityqueue.Opts[T]) {
		o.RateLimiter = rateLimiter
		o.Log = ctrl.Log.WithValues("controller", name)
	})
	return &Queue[T]{PriorityQueue: inner, namespaceOf: namespaceOf, waiting: map[string]int{}, priority: map[T]int{}}
}

// AddWithOpts adds items at their priority less their namespace's share.
func (q *Queue[T]) AddWithOpts(o priorityqueue.AddOpts, items ...T) {
	base := ptr.Deref(o.Priority, 0)
	for _, item := range items {
		q.mu.Lock()
		ns := q.namespaceOf(item)
		if p, ok := q.priority[item]; !ok {
			q.priority[item] = base
			q.waiting[ns]++
		} else if base > p {
			q.priority[item] = base // the queue keeps the highest priority it was given
		}
		// Its own place counts: the first item of a namespace goes in at its priority.
		fair := base - (q.waiting[ns] - 1)
		q.mu.Unlock()
		q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{After: o.After, RateLimited: o.RateLimited, Priority: &fair}, item)
	}
}

// Add adds item, ready now.
func (q *Queue[T]) Add(item T) { q.AddWithOpts(priorityqueue.AddOpts{}, item) }

// AddAfter adds item, ready after duration.
func (q *Queue[T]) AddAfter(item T, duration time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: duration}, item)
}

// AddRateLimited adds item once the rate limiter allows.
func (q *Queue[T]) AddRateLimited(item T) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

// GetWithPriority takes the next item, and the priority it was added at.
func (q *Queue[T]) GetWithPriority() (T, int, bool) {
	item, fair, shutdown := q.PriorityQueue.GetWithPriority()
	if shutdown {
		return item, fair, shutdown
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	base, ok := q.priority[item]
	if !ok {
		return item, fair, shutdown
	}
	delete(q.priority, item)
	ns := q.namespaceOf(item)
	if q.waiting[ns]--; q.waiting[ns] <= 0 {
		delete(q.waiting, ns)
	}
	return item, base, shutdown
}

// Get takes the next item.
func (q *Queue[T]) Get() (T, bool) {
	item, _, shutdown := q.GetWithPriority()
	return item, shutdown
}
