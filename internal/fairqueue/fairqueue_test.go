package fairqueue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

func newQueue(t *testing.T) *Queue[string] {
	t.Helper()
	q := New("test", workqueue.DefaultTypedControllerRateLimiter[string](), func(item string) string {
		ns, _, _ := strings.Cut(item, "/")
		return ns
	})
	t.Cleanup(q.ShutDown)
	return q
}

// take gets n items, marking each done.
func take(t *testing.T, q *Queue[string], n int) []string {
	t.Helper()
	var out []string
	for range n {
		item, shutdown := q.Get()
		if shutdown {
			t.Fatal("the queue shut down")
		}
		q.Done(item)
		out = append(out, item)
	}
	return out
}

func TestFairness(t *testing.T) {
	for _, tc := range []struct {
		name  string
		add   func(q *Queue[string])
		first []string // what the first len(first) Gets return, in order
	}{
		{"a namespace that floods waits behind one that does not",
			func(q *Queue[string]) {
				for i := range 50 {
					q.Add(fmt.Sprintf("flood/%d", i))
				}
				q.Add("quiet/x")
			},
			[]string{"flood/0", "quiet/x", "flood/1", "flood/2"}},
		{"two that flood take turns, each in its own order",
			func(q *Queue[string]) {
				for i := range 3 {
					q.Add(fmt.Sprintf("a/%d", i))
				}
				for i := range 3 {
					q.Add(fmt.Sprintf("b/%d", i))
				}
			},
			[]string{"a/0", "b/0", "a/1", "b/1", "a/2", "b/2"}},
		{"an item added again keeps one place",
			func(q *Queue[string]) {
				q.Add("a/0")
				q.Add("a/0")
				q.Add("a/0")
				q.Add("b/0")
				q.Add("a/1")
			},
			[]string{"a/0", "b/0", "a/1"}},
		{"a higher priority still goes first",
			func(q *Queue[string]) {
				for i := range 5 {
					q.Add(fmt.Sprintf("a/%d", i))
				}
				q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(-100)}, "b/initial-list")
			},
			[]string{"a/0", "a/1", "a/2", "a/3", "a/4", "b/initial-list"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t)
			tc.add(q)
			// The priority queue takes what was added in a batch of its own.
			time.Sleep(50 * time.Millisecond)
			if got := take(t, q, len(tc.first)); strings.Join(got, " ") != strings.Join(tc.first, " ") {
				t.Errorf("taken %v, want %v", got, tc.first)
			}
		})
	}
}

// TestRequeueKeepsItsPriority: the controller adds an item back at the priority Get gave it; that
// is the priority it was added at, not less its namespace's share, or it would sink each time.
func TestRequeueKeepsItsPriority(t *testing.T) {
	q := newQueue(t)
	for i := range 10 {
		q.Add(fmt.Sprintf("a/%d", i))
	}
	time.Sleep(50 * time.Millisecond)
	for range 10 {
		item, priority, _ := q.GetWithPriority()
		if priority != 0 {
			t.Errorf("%s taken at priority %d, want the 0 it was added at", item, priority)
		}
		q.Done(item)
	}
	q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(0)}, "a/0")
	time.Sleep(50 * time.Millisecond)
	if item, priority, _ := q.GetWithPriority(); item != "a/0" || priority != 0 {
		t.Errorf("requeued: %s at %d, want a/0 at 0", item, priority)
	}
	if len(q.waiting) != 0 || len(q.priority) != 0 {
		t.Errorf("after every item was taken: waiting %v, priorities %v", q.waiting, q.priority)
	}
}
