package engine

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// unknownVersion marks a run whose latest version is unknown (a write conflicted): its next
// reconcile reads it from the API server.
const unknownVersion = "?"

// writtenVersions remembers the resourceVersion of each run as this engine last wrote it. A
// reconcile that finds another version in the cache reads the run from the API server instead:
// the cache may not have the last write yet, and a pass working from a stale status would repeat
// steps with side effects (an HTTP call, a Job) that the status already records as done.
type writtenVersions struct {
	mu sync.Mutex
	m  map[types.NamespacedName]string
}

func newWrittenVersions() *writtenVersions {
	return &writtenVersions{m: map[types.NamespacedName]string{}}
}

// stale reports whether a run read from the cache at version rv may miss this engine's writes.
func (w *writtenVersions) stale(key types.NamespacedName, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	want, ok := w.m[key]
	return ok && want != rv
}

// known reports whether this engine wrote the run and has not seen it gone.
func (w *writtenVersions) known(key types.NamespacedName) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.m[key]
	return ok
}

// set records the version a write produced (or unknownVersion).
func (w *writtenVersions) set(key types.NamespacedName, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.m[key] = rv
}

// update records the version a write produced if the run is still remembered (its cache may
// have let it go meanwhile).
func (w *writtenVersions) update(key types.NamespacedName, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.m[key]; ok {
		w.m[key] = rv
	}
}

// forget drops a run that is gone.
func (w *writtenVersions) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	deleteShrinking(&w.m, key)
}

// deleteShrinking deletes key from *m and, once *m is empty, replaces it with a new map. A Go map
// keeps the space of its largest size after its entries are deleted: the maps that follow writes
// in flight would otherwise hold a burst's worth (10,000 deletions at once) for good.
func deleteShrinking[K comparable, V any](m *map[K]V, key K) {
	n := len(*m)
	delete(*m, key)
	if n > 0 && len(*m) == 0 {
		*m = map[K]V{}
	}
}
