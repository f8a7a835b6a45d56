package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// arm writes the live object's finalizers. A request on an object just armed is looked at once
// its finalizer is in the cache, and a guard that could not be evaluated is tried again: the
// write's own event does both. Without a two-phase policy or a guard that event has nothing to do,
// and is not reconciled (armingEchoes).
func (r *targetReconciler) arm(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, finalizers []string) error {
	skipEcho := r.finalizersOnly(key)
	if skipEcho {
		r.echoes.expect(key, finalizers)
	}
	rv, err := r.fin.write(ctx, key.GVK(), obj, finalizers)
	if err != nil {
		r.echoes.cancel(key)
		if apierrors.IsNotFound(err) {
			return nil // it went: nothing to protect
		}
		return fmt.Errorf("writing finalizers of %s: %w", key, err)
	}
	if skipEcho {
		r.echoes.wrote(key, rv)
	}
	return nil
}

// finalizersOnly reports whether the policies that may protect the object key names ask no more
// of a reconcile of it than its finalizers: none is two-phase (whose requests are looked at on
// every reconcile) or has a deletion guard (evaluated on every reconcile).
func (r *targetReconciler) finalizersOnly(key TargetKey) bool {
	for _, p := range r.registry.ForGVK(key.GVK()) {
		if (p.TwoPhase() || p.Guard != nil) && p.InScope(key.Namespace) {
			return false
		}
	}
	return true
}

// armingEchoes remembers the finalizer list each write of a live object's finalizers sets, so that
// the watch event the write causes does not reconcile the object again: the reconcile that wrote
// it decided on that very version, finalizers aside, and left nothing to do. Halving the
// reconciles of arming also keeps a burst of new objects from leaving a second queue of them
// behind. The write is known by what it changed, and by the version it made once its response
// has come: its event can arrive before its response.
type armingEchoes struct {
	mu sync.Mutex
	m  map[TargetKey]armingWrite
}

// armingWrite is one write of an object's finalizers: the list it sets, and the version it made
// once its response has come ("" before).
type armingWrite struct {
	finalizers []string
	rv         string
}

func newArmingEchoes() *armingEchoes {
	return &armingEchoes{m: map[TargetKey]armingWrite{}}
}

// expect records that this engine is about to set the finalizers of the object key names.
func (a *armingEchoes) expect(key TargetKey, finalizers []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.m[key] = armingWrite{finalizers: slices.Clone(finalizers)}
}

// wrote records the version the write made, unless its event came first. From then on only an
// event of that version is its echo: after a relist, an update can carry the write and a later
// change together.
func (a *armingEchoes) wrote(key TargetKey, rv string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w, ok := a.m[key]; ok {
		w.rv = rv
		a.m[key] = w
	}
}

// cancel forgets a write that failed.
func (a *armingEchoes) cancel(key TargetKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	deleteShrinking(&a.m, key)
}

// echo reports whether an update of the object from old to cur is the echo of the write expected
// for it: the finalizers it set (at the version it made, once known), and nothing else changed.
// Any event forgets the write: events come in order, so another one means the echo came before
// it or never comes as such.
func (a *armingEchoes) echo(key TargetKey, old, cur *metav1.PartialObjectMetadata) bool {
	a.mu.Lock()
	w, ok := a.m[key]
	deleteShrinking(&a.m, key)
	a.mu.Unlock()
	return ok && old != nil && (w.rv == "" || w.rv == cur.ResourceVersion) &&
		slices.Equal(cur.Finalizers, w.finalizers) && onlyFinalizersChanged(old, cur)
}

// onlyFinalizersChanged reports whether two versions of a live object differ in nothing a
// reconcile reads from the cache but their finalizers.
func onlyFinalizersChanged(old, cur *metav1.PartialObjectMetadata) bool {
	return old.UID == cur.UID && old.DeletionTimestamp == nil && cur.DeletionTimestamp == nil &&
		old.Generation == cur.Generation && maps.Equal(old.Labels, cur.Labels) && maps.Equal(old.Annotations, cur.Annotations) &&
		equality.Semantic.DeepEqual(old.OwnerReferences, cur.OwnerReferences)
}
