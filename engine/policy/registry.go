package policy

import (
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Registry holds the compiled policies, indexed by target kind. It is safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	policies map[Key]*Compiled
	invalid  map[Key]schema.GroupVersionKind
	byGVK    map[schema.GroupVersionKind][]*Compiled
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{policies: map[Key]*Compiled{}, invalid: map[Key]schema.GroupVersionKind{}, byGVK: map[schema.GroupVersionKind][]*Compiled{}}
}

// Set stores a compiled policy, replacing any earlier version, and returns the earlier one.
func (r *Registry) Set(c *Compiled) *Compiled {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.policies[c.Key]
	delete(r.invalid, c.Key)
	r.policies[c.Key] = c
	r.reindex()
	return prev
}

// SetInvalid records that a policy exists but cannot run, so its finalizers are neither added
// nor mistaken for orphans.
func (r *Registry) SetInvalid(key Key, gvk schema.GroupVersionKind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.policies, key)
	r.invalid[key] = gvk
	r.reindex()
}

// Delete forgets a policy and returns what was stored.
func (r *Registry) Delete(key Key) *Compiled {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.policies[key]
	delete(r.policies, key)
	delete(r.invalid, key)
	r.reindex()
	return prev
}

func (r *Registry) reindex() {
	idx := make(map[schema.GroupVersionKind][]*Compiled, len(r.byGVK))
	for _, c := range r.policies {
		idx[c.GVK] = append(idx[c.GVK], c)
	}
	for _, list := range idx {
		sort.Slice(list, func(i, j int) bool { return list[i].Key.String() < list[j].Key.String() })
	}
	r.byGVK = idx
}

// Get returns the compiled policy for key, if it is valid.
func (r *Registry) Get(key Key) *Compiled {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.policies[key]
}

// Known reports whether the registry has seen the policy, valid or not.
func (r *Registry) Known(key Key) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.policies[key]
	_, bad := r.invalid[key]
	return ok || bad
}

// ForGVK returns the valid policies that target a kind. The slice must not be modified.
func (r *Registry) ForGVK(gvk schema.GroupVersionKind) []*Compiled {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byGVK[gvk]
}

// UsesGVK reports whether any policy, valid or not, targets the kind.
func (r *Registry) UsesGVK(gvk schema.GroupVersionKind) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.byGVK[gvk]) > 0 {
		return true
	}
	for _, g := range r.invalid {
		if g == gvk {
			return true
		}
	}
	return false
}

// ForFinalizer returns the key of the policy that owns finalizer on an object in namespace ns,
// among the policies the registry knows (valid or not).
func (r *Registry) ForFinalizer(finalizer, ns string) (Key, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for k := range r.policies {
		if k.Finalizer() == finalizer && (k.Kind == KindCluster || k.Namespace == ns) {
			return k, true
		}
	}
	for k := range r.invalid {
		if k.Finalizer() == finalizer && (k.Kind == KindCluster || k.Namespace == ns) {
			return k, true
		}
	}
	return Key{}, false
}

// GVKs returns the kinds some valid policy targets.
func (r *Registry) GVKs() []schema.GroupVersionKind {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]schema.GroupVersionKind, 0, len(r.byGVK))
	for gvk := range r.byGVK {
		out = append(out, gvk)
	}
	return out
}
