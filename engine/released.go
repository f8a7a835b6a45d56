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

// holds reports whether the cached obj still shows finalizer although this engine removed it.
// What the cache shows removed, or an object of another UID, is forgotten.
func (r *releasedTargets) holds(key TargetKey, obj *metav1.PartialObjectMetadata, finalizer string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	if !ok {
		return false
	}
	if e.uid != obj.UID {
		delete(r.m, key)
		return false
	}
	e.finalizers = slices.DeleteFunc(e.finalizers, func(f string) bool { return !slices.Contains(obj.Finalizers, f) })
	if len(e.finalizers) == 0 {
		delete(r.m, key)
		return false
	}
	r.m[key] = e
	return slices.Contains(e.finalizers, finalizer)
}

// forget drops what is remembered of an object the cache no longer holds.
func (r *releasedTargets) forget(key TargetKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}
