package engine

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/teardown-dev/teardown-operator/engine/ownwrites"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// armer writes the finalizers of the target reconciler's objects, and remembers the echo of an
// arming write that has nothing to reconcile.
type armer struct {
	fin    *finalizerWriter
	echoes *ownwrites.Echoes[TargetKey]
	// late counts the objects the operator armed itself, by policy: not at admission.
	late *prometheus.CounterVec
}

// arm writes the live object's finalizers. A request on an object just armed is looked at once
// its finalizer is in the cache, and a guard that could not be evaluated is tried again: the
// write's own event does both. When the object's policies ask no more than its finalizers
// (skipEcho), that event has nothing to do, and is not reconciled (ownwrites.Echoes).
func (a armer) arm(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, finalizers []string, skipEcho bool) error {
	if skipEcho {
		a.echoes.Expect(key, finalizers)
	}
	rv, err := a.fin.write(ctx, key.GVK(), obj, finalizers)
	if err != nil {
		a.echoes.Cancel(key)
		if apierrors.IsNotFound(err) {
			return nil // it went: nothing to protect
		}
		return fmt.Errorf("writing finalizers of %s: %w", key, err)
	}
	if skipEcho {
		a.echoes.Wrote(key, rv)
	}
	return nil
}

// armedLate counts the finalizers the operator added, by policy (teardown_objects_armed_by_operator_total).
func (a armer) armedLate(registry *policy.Registry, ns string, added []string) {
	if a.late == nil {
		return
	}
	for _, f := range added {
		if pkey, ok := registry.ForFinalizer(f, ns); ok {
			a.late.WithLabelValues(pkey.String()).Inc()
		}
	}
}

// release removes one finalizer from the object of that UID.
func (a armer) release(ctx context.Context, key TargetKey, uid types.UID, finalizer string) error {
	_, err := a.fin.remove(ctx, key.GVK(), key.Namespace, key.Name, uid, finalizer)
	return err
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
