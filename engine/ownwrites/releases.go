package ownwrites

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Releases remembers the finalizers the engine removed from objects at the end of their teardown,
// until the target cache shows them removed. The cache may still show such a finalizer for a moment
// after its release, when the run is no longer cached (a released run leaves the run cache; with
// runHistory SkipImmediateSuccess an instant success has none): a reconcile in that window would start the
// teardown again.
type Releases[K comparable] struct {
	mu sync.Mutex
	m  map[K]release
}

type release struct {
	uid        types.UID
	finalizers []string
}

// NewReleases returns an empty memory.
func NewReleases[K comparable]() *Releases[K] {
	return &Releases[K]{m: map[K]release{}}
}

// Add records that finalizer was removed from the object key names, of UID uid.
func (r *Releases[K]) Add(key K, uid types.UID, finalizer string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[key]
	if e.uid != uid {
		e = release{uid: uid}
	}
	if !slices.Contains(e.finalizers, finalizer) {
		e.finalizers = append(e.finalizers, finalizer)
	}
	r.m[key] = e
}

// Prune forgets what the cached obj shows done: finalizers no longer on it, or all of an earlier
// object of the same name. Every event of the object calls it, so an entry lasts until the
// cache has caught up with the release (or the object is gone: see Forget).
func (r *Releases[K]) Prune(key K, obj *metav1.PartialObjectMetadata) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	if !ok {
		return
	}
	if e.uid == obj.UID {
		e.finalizers = slices.DeleteFunc(e.finalizers, func(f string) bool { return !slices.Contains(obj.Finalizers, f) })
	}
	if e.uid != obj.UID || len(e.finalizers) == 0 {
		deleteShrinking(&r.m, key)
		return
	}
	r.m[key] = e
}

// Holds reports whether the engine removed finalizer from the object of that UID and the cache
// has not shown it yet. It needs no Prune first: Prune only forgets finalizers the cached
// object no longer carries, and only those it carries are asked about.
func (r *Releases[K]) Holds(key K, uid types.UID, finalizer string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	return ok && e.uid == uid && slices.Contains(e.finalizers, finalizer)
}

// Forget drops what is remembered of an object that is gone.
func (r *Releases[K]) Forget(key K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	deleteShrinking(&r.m, key)
}
