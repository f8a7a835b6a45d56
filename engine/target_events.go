package engine

import (
	"github.com/teardown-dev/teardown-operator/engine/ownwrites"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
)

// targetEvents is the target reconciler's handler: every change of an object of a kind some
// policy targets is reconciled, but the echo of the engine's own arming write; an object that is
// gone reconciles nothing (the cache no longer has it).
type targetEvents struct {
	registry *policy.Registry
	echoes   *ownwrites.Echoes[TargetKey]
	targets  queue[TargetKey]
}

func (h targetEvents) handle(ev watch.Event) {
	key := NewTargetKey(ev.GVK, ev.Object.Namespace, ev.Object.Name)
	// Any event forgets the arming write expected (see ownwrites.Echoes.Echo).
	echo := h.echoes.Echo(key, ev.Old, ev.Object)
	if !ev.Deleted && !echo && h.registry.UsesGVK(ev.GVK) {
		h.targets.Add(key)
	}
}
