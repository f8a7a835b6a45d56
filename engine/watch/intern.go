package watch

import (
	"encoding/binary"
	"slices"
	"sync"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Cached objects of one kind mostly repeat each other: the same namespace, the same finalizer,
// the same few label sets (every pod of a ReplicaSet, every object an application deploys). A
// decoded object carries its own copy of each, so an interner makes every cached object share one
// copy; for a label set that is half of what a cached object costs. Sharing is safe because
// nothing mutates a cached object (the engine deep-copies before it writes).
const (
	// maxSharedSets bounds the label and annotation sets remembered for sharing. Past it the
	// interner starts afresh: sets already shared stay shared, and a kind whose every object has a
	// set of its own (a StatefulSet pod's name label) keeps at most this many sets alive after
	// their objects are gone (a few MiB at most).
	maxSharedSets = 4096
	// maxSharedSetBytes leaves large sets (annotations holding documents) to their object: their
	// key would cost more to build than sharing saves, and they are seldom repeated.
	maxSharedSetBytes = 1024
)

// interner shares equal strings and equal string maps between cached objects.
type interner struct {
	mu   sync.Mutex
	key  []byte
	keys []string
	sets map[string]map[string]string
}

func newInterner() *interner {
	return &interner{sets: map[string]map[string]string{}}
}

// object makes o share what it has in common with objects seen before. o must not be shared yet.
func (in *interner) object(o *metav1.PartialObjectMetadata) {
	o.APIVersion, o.Kind = intern(o.APIVersion), intern(o.Kind)
	o.Namespace, o.GenerateName = intern(o.Namespace), intern(o.GenerateName)
	for i, f := range o.Finalizers {
		o.Finalizers[i] = intern(f)
	}
	for i := range o.OwnerReferences {
		ref := &o.OwnerReferences[i]
		ref.APIVersion, ref.Kind = intern(ref.APIVersion), intern(ref.Kind)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	o.Labels = in.set(o.Labels)
	o.Annotations = in.set(o.Annotations)
}

// set returns the remembered map equal to m, or remembers m (its strings interned) and returns it.
func (in *interner) set(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	in.keys = in.keys[:0]
	size := 0
	for k, v := range m {
		in.keys = append(in.keys, k)
		size += len(k) + len(v) + 2
	}
	if size > maxSharedSetBytes {
		return m
	}
	slices.Sort(in.keys)
	// Each string goes in with its length first: annotation values may hold any byte, so no
	// separator could tell where one ends.
	in.key = in.key[:0]
	for _, k := range in.keys {
		in.key = append(binary.AppendUvarint(in.key, uint64(len(k))), k...)
		in.key = append(binary.AppendUvarint(in.key, uint64(len(m[k]))), m[k]...)
	}
	if shared, ok := in.sets[string(in.key)]; ok {
		return shared
	}
	if len(in.sets) >= maxSharedSets {
		clear(in.sets)
	}
	shared := make(map[string]string, len(m))
	for k, v := range m {
		shared[intern(k)] = intern(v)
	}
	in.sets[string(in.key)] = shared
	return shared
}

// intern returns the one copy of s that every caller shares.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
