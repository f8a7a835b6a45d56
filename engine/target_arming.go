package engine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// arm writes the live object's finalizers. A request on an object just armed is looked at once
// its finalizer is in the cache, and a guard that could not be evaluated is tried again: the
// write's own event does both. Without a two-phase policy or a guard that event has nothing to do,
// and is not reconciled (ownwrites.Echoes).
func (r *targetReconciler) arm(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, finalizers []string) error {
	skipEcho := r.finalizersOnly(key)
	if skipEcho {
		r.echoes.Expect(key, finalizers)
	}
	rv, err := r.fin.write(ctx, key.GVK(), obj, finalizers)
	if err != nil {
		r.echoes.Cancel(key)
		if apierrors.IsNotFound(err) {
			return nil // it went: nothing to protect
		}
		return fmt.Errorf("writing finalizers of %s: %w", key, err)
	}
	if skipEcho {
		r.echoes.Wrote(key, rv)
	}
	return nil
}

// finalizersOnly reports whether the policies that may protect the object key names ask no more
// of a reconcile of it than its finalizers: none is two-phase (whose requests are looked at on
// every reconcile) or has a deletion guard (evaluated on every reconcile).
func (r *targetReconciler) finalizersOnly(key TargetKey) bool {
	for _, p := range r.registry.ForGVK(key.GVK()) {
		if (p.TwoPhase() || p.Guard != nil) && p.InScope(key.Namespace) {
			return false
		}
	}
	return true
}
