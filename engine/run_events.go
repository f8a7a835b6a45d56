package engine

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/ownwrites"
	"github.com/teardown-dev/teardown-operator/engine/watch"
)

// runEvents is the run reconciler's handler for target events: a change that concerns a target's
// unfinished runs wakes them (runsCare), and the finalizers runs released that the cached object
// shows gone, or the object itself, are forgotten.
type runEvents struct {
	// runsOf returns the cached runs of the target of that UID.
	runsOf   func(ctx context.Context, uid types.UID) []v1alpha1.TeardownRun
	released *ownwrites.Releases[TargetKey]
	runs     queue[reconcile.Request]
}

// vanishedDelay is how long after a target is gone its unfinished runs look at it.
const vanishedDelay = 2 * time.Second

func (h runEvents) handle(ev watch.Event) {
	if key := NewTargetKey(ev.GVK, ev.Object.Namespace, ev.Object.Name); ev.Deleted {
		h.released.Forget(key)
	} else {
		h.released.Prune(key, ev.Object)
	}
	if !runsCare(ev) {
		return
	}
	for _, r := range h.runsOf(context.Background(), ev.Object.UID) {
		if releasesObject(&r) {
			continue
		}
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: r.Namespace, Name: r.Name}}
		if ev.Deleted {
			// Usually the run's own release made the target go, and the run cache has not
			// seen the run finish yet: look a little later rather than at a stale copy.
			h.runs.AddAfter(req, vanishedDelay)
		} else {
			h.runs.Add(req)
		}
	}
}

// runsCare reports whether a change to a target concerns its runs: its deletion starting, the
// break-glass annotation, a delete request made or withdrawn, or the object going. Other changes (notably the release of another
// finalizer) would only wake runs to read a cache that has not caught up yet.
func runsCare(ev watch.Event) bool {
	o, old := ev.Object, ev.Old
	switch {
	case ev.Deleted:
		return true
	case old == nil:
		return o.DeletionTimestamp != nil
	case o.DeletionTimestamp != nil && old.DeletionTimestamp == nil:
		return true
	}
	return o.Annotations[v1alpha1.AnnotationAbandon] != old.Annotations[v1alpha1.AnnotationAbandon] || requestChanged(ev)
}

// lookupEvents is the run reconciler's handler for the kinds wait steps look up: a change wakes
// the runs waiting on that kind in that namespace, folded to at most one check per run per
// lookupDebounce however busy the kind.
type lookupEvents struct {
	lookups *interest[reconcile.Request]
	runs    queue[reconcile.Request]
}

// lookupDebounce folds the changes to looked-up objects into at most one check per run per second.
const lookupDebounce = time.Second

func (h lookupEvents) handle(ev watch.Event) {
	for _, r := range h.lookups.interested(ev.GVK, ev.Object.Namespace) {
		h.runs.AddAfter(r, lookupDebounce)
	}
}
