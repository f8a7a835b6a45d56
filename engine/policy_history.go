package engine

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/eventsink"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// A policy's status carries a short history of its teardowns (status.teardowns,
// status.recentTeardowns): with runHistory SkipImmediateSuccess most teardowns leave no run, and
// this is where `kubectl get -o wide` and `describe` still show them. The run side reports each
// teardown that ends (teardownHistory.ended); the policy's reconcile takes what ended since its
// last write into the status it writes, at most once per historyEvery, so that the history
// costs no write per teardown. What has not been written when a replica stops is lost; the
// "teardown ended" log line has it.

// historyEvery is how often at most a policy's status takes in the teardowns that ended.
const historyEvery = 5 * time.Second

// maxRecent is how many teardowns status.recentTeardowns keeps (the CRD's maxItems).
const maxRecent = 10

// maxRecentMessage cuts a recent teardown's message (the CRD's maxLength).
const maxRecentMessage = 256

// historyDelta is what ended since a policy's history was last written: the counts, and the
// newest maxRecent teardowns, oldest first. seq is the number of the last one taken in; uid is the
// policy's.
type historyDelta struct {
	counts v1alpha1.TeardownCounts
	recent []v1alpha1.RecentTeardown
	seq    uint64
	uid    types.UID
}

func (d *historyDelta) empty() bool { return d == nil || d.seq == 0 }

// pendingHistory is one policy's teardowns not written yet; seqs numbers recent's entries.
type pendingHistory struct {
	delta     historyDelta
	seqs      []uint64
	lastWrite time.Time
}

// teardownHistory keeps, per policy, the teardowns that ended and are not in its status yet. It
// is safe for concurrent use. A policy is known by its key and UID: one deleted and made again
// under its name starts afresh, and a run of the earlier one that ends late counts for neither.
type teardownHistory struct {
	mu       sync.Mutex
	byPolicy map[policy.Key]map[types.UID]*pendingHistory
	next     uint64
	// recount queues the policy's status write after a delay.
	recount func(key policy.Key, after time.Duration)
	now     func() time.Time
}

func newTeardownHistory(recount func(policy.Key, time.Duration)) *teardownHistory {
	return &teardownHistory{byPolicy: map[policy.Key]map[types.UID]*pendingHistory{}, recount: recount, now: time.Now}
}

// ended records a teardown of policy key that ended, and queues the policy's status write for
// the moment its history may be written next.
func (h *teardownHistory) ended(key policy.Key, uid types.UID, t v1alpha1.RecentTeardown) {
	t.Message = eventsink.Truncate(t.Message, maxRecentMessage)
	h.mu.Lock()
	if h.byPolicy[key] == nil {
		h.byPolicy[key] = map[types.UID]*pendingHistory{}
	}
	p := h.byPolicy[key][uid]
	if p == nil {
		p = &pendingHistory{delta: historyDelta{uid: uid}}
		h.byPolicy[key][uid] = p
	}
	h.next++
	addCount(&p.delta.counts, t.Outcome, 1)
	p.delta.recent, p.seqs = append(p.delta.recent, t), append(p.seqs, h.next)
	if n := len(p.delta.recent) - maxRecent; n > 0 {
		p.delta.recent, p.seqs = slices.Delete(p.delta.recent, 0, n), slices.Delete(p.seqs, 0, n)
	}
	p.delta.seq = h.next
	wait := max(p.lastWrite.Add(historyEvery).Sub(h.now()), 0)
	h.mu.Unlock()
	h.recount(key, wait)
}

// take returns what ended since the policy of that UID last had its history written, if it may
// be written now; otherwise nil, and how long until it may. What policies of the same name and
// another UID left is dropped: they are gone.
func (h *teardownHistory) take(key policy.Key, uid types.UID) (*historyDelta, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for other := range h.byPolicy[key] {
		if other != uid {
			delete(h.byPolicy[key], other)
		}
	}
	p := h.byPolicy[key][uid]
	if p == nil || p.delta.seq == 0 {
		return nil, 0
	}
	if wait := p.lastWrite.Add(historyEvery).Sub(h.now()); wait > 0 {
		return nil, wait
	}
	d := p.delta
	d.recent = slices.Clone(d.recent)
	return &d, 0
}

// written forgets what d took into the policy's status, now written; what ended since stays.
func (h *teardownHistory) written(key policy.Key, d *historyDelta) {
	if d.empty() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.byPolicy[key][d.uid]
	if p == nil {
		return
	}
	p.lastWrite = h.now()
	addCounts(&p.delta.counts, d.counts, -1)
	i := 0
	for i < len(p.seqs) && p.seqs[i] <= d.seq {
		i++
	}
	p.delta.recent, p.seqs = slices.Delete(p.delta.recent, 0, i), slices.Delete(p.seqs, 0, i)
	if p.delta.seq == d.seq {
		p.delta.seq = 0 // nothing ended since
	}
}

// forget drops what is kept of a policy that is gone.
func (h *teardownHistory) forget(key policy.Key) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byPolicy, key)
}

// withHistory is st with d taken in: the counts added, the recent teardowns newest first.
func withHistory(st v1alpha1.TeardownPolicyStatus, d *historyDelta) v1alpha1.TeardownPolicyStatus {
	if d.empty() {
		return st
	}
	addCounts(&st.Teardowns, d.counts, 1)
	recent := make([]v1alpha1.RecentTeardown, 0, maxRecent)
	for i := len(d.recent) - 1; i >= 0 && len(recent) < maxRecent; i-- {
		recent = append(recent, d.recent[i])
	}
	for i := 0; i < len(st.RecentTeardowns) && len(recent) < maxRecent; i++ {
		recent = append(recent, st.RecentTeardowns[i])
	}
	st.RecentTeardowns = recent
	return st
}

// addCount counts one more end of outcome in c.
func addCount(c *v1alpha1.TeardownCounts, outcome v1alpha1.RunPhase, n int64) {
	switch outcome {
	case v1alpha1.RunSucceeded:
		c.Succeeded += n
	case v1alpha1.RunFailed:
		c.Failed += n
	case v1alpha1.RunAbandoned:
		c.Abandoned += n
	case v1alpha1.RunCancelled:
		c.Cancelled += n
	}
}

// addCounts adds sign times d to c.
func addCounts(c *v1alpha1.TeardownCounts, d v1alpha1.TeardownCounts, sign int64) {
	c.Succeeded += sign * d.Succeeded
	c.Failed += sign * d.Failed
	c.Abandoned += sign * d.Abandoned
	c.Cancelled += sign * d.Cancelled
}
