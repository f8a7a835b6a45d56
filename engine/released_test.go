package engine

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestReleasedTargetsUntilTheCacheCatchesUp(t *testing.T) {
	key := TargetKey{Namespace: "ns", Name: "db"}
	cached := func(uid types.UID, finalizers ...string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: uid, Finalizers: finalizers}}
	}
	r := newReleasedTargets()
	r.add(key, "u1", "a")
	r.add(key, "u1", "b")
	steps := []struct {
		name      string
		obj       *metav1.PartialObjectMetadata
		finalizer string
		want      bool
	}{
		{"the stale cache still shows a released finalizer", cached("u1", "a", "b", "other"), "a", true},
		{"and the other", cached("u1", "a", "b", "other"), "b", true},
		{"a finalizer this engine did not release", cached("u1", "a", "b", "other"), "other", false},
		{"the cache shows a removed: forgotten", cached("u1", "b", "other"), "b", true},
		{"a is not asked back", cached("u1", "a", "b"), "a", false},
		{"a new object of the same name", cached("u2", "b"), "b", false},
		{"the old one is forgotten", cached("u1", "b"), "b", false},
	}
	for _, s := range steps {
		if got := r.holds(key, s.obj, s.finalizer); got != s.want {
			t.Errorf("%s: holds(%s) = %v, want %v", s.name, s.finalizer, got, s.want)
		}
	}
	r.add(key, "u3", "a")
	r.forget(key)
	if r.holds(key, cached("u3", "a"), "a") {
		t.Error("an object gone from the cache is forgotten")
	}
	if len(r.m) != 0 {
		t.Errorf("%d objects still remembered", len(r.m))
	}
}
