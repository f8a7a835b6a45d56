package ownwrites

import (
	"maps"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Echoes remembers the finalizer list each write of a live object's finalizers sets, so that the
// watch event the write causes does not reconcile the object again: the reconcile that wrote it
// decided on that very version, finalizers aside, and left nothing to do. Halving the reconciles
// of arming also keeps a burst of new objects from leaving a second queue of them behind. The
// write is known by what it changed, and by the version it made once its response has come: its
// event can arrive before its response.
type Echoes[K comparable] struct {
	mu sync.Mutex
	m  map[K]finalizerWrite
}

// finalizerWrite is one write of an object's finalizers: the list it sets, and the version it made
// once its response has come ("" before).
type finalizerWrite struct {
	finalizers []string
	rv         string
}

// NewEchoes returns an empty memory.
func NewEchoes[K comparable]() *Echoes[K] {
	return &Echoes[K]{m: map[K]finalizerWrite{}}
}

// Expect records that the engine is about to set the finalizers of the object key names.
func (a *Echoes[K]) Expect(key K, finalizers []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.m[key] = finalizerWrite{finalizers: slices.Clone(finalizers)}
}

// Wrote records the version the write made, unless its event came first. From then on only an
// event of that version is its echo: after a relist, an update can carry the write and a later
// change together.
func (a *Echoes[K]) Wrote(key K, rv string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w, ok := a.m[key]; ok {
		w.rv = rv
		a.m[key] = w
	}
}

// Cancel forgets a write that failed.
func (a *Echoes[K]) Cancel(key K) {
	a.mu.Lock()
	defer a.mu.Unlock()
	deleteShrinking(&a.m, key)
}

// Echo reports whether an update of the object from old to cur is the echo of the write expected
// for it: the finalizers it set (at the version it made, once known), and nothing else changed.
// Any event forgets the write: events come in order, so another one means the echo came before
// it or never comes as such.
func (a *Echoes[K]) Echo(key K, old, cur *metav1.PartialObjectMetadata) bool {
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
