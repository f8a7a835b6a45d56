package engine

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// releasedTargets remembers the finalizers this engine removed from objects at the end of their
// teardown, until the target cache shows them removed. The cache may still show such a finalizer
// for a moment after its release, when the run is no longer cached (a released run leaves the run
// cache; with runHistory OnFailure an instant success has none): a reconcile in that window would
// start the teardown again.
type releasedTargets struct {
	mu sync.Mutex
	m  map[TargetKey]released
}

type released struct {
	uid        types.UID
	finalizers []string
}

func newReleasedTargets() *releasedTargets {
	return &releasedTargets{m: map[TargetKey]released{}}
}

// add records that finalizer was removed from the object key names, of UID uid.
func (r *releasedTargets) add(key TargetKey, uid types.UID, finalizer string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[key]
	if e.uid != uid {
		e = released{uid: uid}
	}
	if !slices.Contains(e.finalizers, finalizer) {
		e.finalizers = append(e.finalizers, finalizer)
	}
	r.m[key] = e
}

// prune forgets what the cached obj shows done: finalizers no longer on it, or all of an earlier
// object of the same name. Every reconcile of a target calls it, so an entry lasts until the
// cache has caught up with the release (or the object is gone: see forget).
func (r *releasedTargets) prune(key TargetKey, obj *metav1.PartialObjectMetadata) {
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

// holds reports whether this engine removed finalizer from the object of that UID and the cache
// has not shown it yet (call prune first).
func (r *releasedTargets) holds(key TargetKey, uid types.UID, finalizer string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	return ok && e.uid == uid && slices.Contains(e.finalizers, finalizer)
}

// forget drops what is remembered of an object that is gone.
func (r *releasedTargets) forget(key TargetKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	deleteShrinking(&r.m, key)
}
