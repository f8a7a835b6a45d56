package ownwrites

import "sync"

// Unknown marks an object whose latest version is unknown (a write conflicted or failed): its next
// reconcile reads it from the API server.
const Unknown = "?"

// Versions remembers the resourceVersion of each object (a run) as the engine last wrote it. A
// reconcile that finds another version in the cache reads the object from the API server instead:
// the cache may not have the last write yet, and a pass working from a stale status would repeat
// steps with side effects (an HTTP call, a Job) that the status already records as done.
type Versions[K comparable] struct {
	mu sync.Mutex
	m  map[K]string
}

// NewVersions returns an empty memory.
func NewVersions[K comparable]() *Versions[K] {
	return &Versions[K]{m: map[K]string{}}
}

// Stale reports whether an object read from the cache at version rv may miss the engine's writes.
func (w *Versions[K]) Stale(key K, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	want, ok := w.m[key]
	return ok && want != rv
}

// Known reports whether the engine wrote the object and has not seen it gone.
func (w *Versions[K]) Known(key K) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.m[key]
	return ok
}

// Set records the version a write produced (or Unknown).
func (w *Versions[K]) Set(key K, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.m[key] = rv
}

// Update records the version a write produced if the object is still remembered (its cache may
// have let it go meanwhile).
func (w *Versions[K]) Update(key K, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.m[key]; ok {
		w.m[key] = rv
	}
}

// Forget drops an object that is gone.
func (w *Versions[K]) Forget(key K) {
	w.mu.Lock()
	defer w.mu.Unlock()
	deleteShrinking(&w.m, key)
}
