// Package ownwrites remembers the engine's own recent writes that its caches may not show yet.
//
// The engine decides on cached objects (informer caches fed by watches), and a cache lags the API
// server: for a moment after the engine writes an object, the cache can still serve the version
// before the write, or a version from before a relist. Deciding on that stale copy would repeat
// what the write already did: run a step recorded done, start a teardown already released, or
// reconcile again an object whose only change is the engine's own finalizer write. Each memory
// here covers one such write, is consulted before deciding on a cached object, and forgets the
// write as soon as the cache shows it (or the object is gone), so it holds only writes in flight.
//
//   - Versions: the resourceVersion of each run as the engine last wrote it; a cached run at
//     another version is read from the API server instead.
//   - Releases: the finalizers the engine removed at the end of a teardown, until the target cache
//     shows them removed.
//   - Echoes: the finalizer lists the engine wrote on live objects, so that the watch event of
//     such a write is not reconciled again.
//
// Every map is replaced by a new one once it empties: a Go map keeps the space of its largest size,
// and a burst of 10,000 deletions would otherwise leave that much behind for good.
package ownwrites

// deleteShrinking deletes key from *m and, once *m is empty, replaces it with a new map (see the
// package comment).
func deleteShrinking[K comparable, V any](m *map[K]V, key K) {
	n := len(*m)
	delete(*m, key)
	if n > 0 && len(*m) == 0 {
		*m = map[K]V{}
	}
}
