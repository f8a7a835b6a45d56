package ownwrites

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestReleasesUntilTheCacheCatchesUp(t *testing.T) {
	key := "ns/db"
	cached := func(uid types.UID, finalizers ...string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: uid, Finalizers: finalizers}}
	}
	r := NewReleases[string]()
	r.Add(key, "u1", "a")
	r.Add(key, "u1", "b")
	steps := []struct {
		name      string
		obj       *metav1.PartialObjectMetadata
		finalizer string
		want      bool
	}{
		{"the stale cache still shows a released finalizer", cached("u1", "a", "b", "other"), "a", true},
		{"and the other", cached("u1", "a", "b", "other"), "b", true},
		{"a finalizer this engine did not release", cached("u1", "a", "b", "other"), "other", false},
		{"the cache shows a removed: b is still held", cached("u1", "b", "other"), "b", true},
		{"a, added back later (a released two-phase object armed again), is not held", cached("u1", "a", "b"), "a", false},
		{"only a foreign finalizer left: all forgotten", cached("u1", "other"), "b", false},
	}
	for _, s := range steps {
		r.Prune(key, s.obj)
		if got := r.Holds(key, s.obj.UID, s.finalizer); got != s.want {
			t.Errorf("%s: holds(%s) = %v, want %v", s.name, s.finalizer, got, s.want)
		}
	}
	if len(r.m) != 0 {
		t.Errorf("%d objects still remembered", len(r.m))
	}

	r.Add(key, "u2", "a")
	r.Prune(key, cached("u3", "a"))
	if r.Holds(key, "u3", "a") || len(r.m) != 0 {
		t.Error("a new object of the same name is not held, and the old one is forgotten")
	}
	r.Add(key, "u4", "a")
	r.Forget(key)
	if r.Holds(key, "u4", "a") {
		t.Error("an object gone from the cache is forgotten")
	}
}

func TestDeleteShrinking(t *testing.T) {
	m := map[int]string{}
	for i := range 10000 {
		m[i] = "x"
	}
	grown := reflect.ValueOf(m).UnsafePointer()
	for i := range 9999 {
		deleteShrinking(&m, i)
	}
	if reflect.ValueOf(m).UnsafePointer() != grown || m[9999] != "x" {
		t.Fatal("a map with entries left was replaced or lost one")
	}
	deleteShrinking(&m, 9999)
	if len(m) != 0 || reflect.ValueOf(m).UnsafePointer() == grown {
		t.Fatal("an emptied map kept its space")
	}
	if n := testing.AllocsPerRun(100, func() { deleteShrinking(&m, 1) }); n != 0 {
		t.Errorf("deleting from an empty map allocates %v times", n)
	}
	m[1] = "y"
	if m[1] != "y" {
		t.Error("the new map does not take entries")
	}
}
