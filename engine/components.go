package engine

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// The reconcilers share a few small services rather than the whole engine: each names the ones
// it uses (see the reconciler types).

// clusterReads are the cached reads several reconcilers make.
type clusterReads struct {
	client client.Client
}

// runsOfTarget returns the cached runs of a target. They are the cache's own objects (no deep
// copy: a policy recount reads every run of the policy): callers only read them.
func (c clusterReads) runsOfTarget(ctx context.Context, uid types.UID) []v1alpha1.TeardownRun {
	var list v1alpha1.TeardownRunList
	if err := c.client.List(ctx, &list, client.MatchingFields{indexTargetUID: string(uid)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return list.Items
}

// runsOfPolicy returns the cached runs of a policy; like runsOfTarget, read only.
func (c clusterReads) runsOfPolicy(ctx context.Context, key policy.Key) ([]v1alpha1.TeardownRun, error) {
	var list v1alpha1.TeardownRunList
	if err := c.client.List(ctx, &list, client.MatchingFields{indexPolicy: key.String()}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// namespaceTerminating reports whether a namespace is being deleted, from the cache.
func (c clusterReads) namespaceTerminating(ctx context.Context, ns string) bool {
	if ns == "" {
		return false
	}
	m, err := c.namespace(ctx, ns)
	return err == nil && m.DeletionTimestamp != nil
}

func (c clusterReads) namespace(ctx context.Context, ns string) (*metav1.PartialObjectMetadata, error) {
	m := metaRef(namespaceGVK, "", ns)
	err := c.client.Get(ctx, client.ObjectKey{Name: ns}, m)
	return m, err
}

// foreignStatusWriter returns a field manager other than the engine's that owns a field of the
// run's status, or "".
func foreignStatusWriter(run *v1alpha1.TeardownRun) string {
	for _, mf := range run.ManagedFields {
		if mf.Manager != FieldManager && mf.FieldsV1 != nil && strings.Contains(mf.FieldsV1.GetRawString(), `"f:status"`) {
			return mf.Manager
		}
	}
	return ""
}

// wakeups are the controllers' queues, for work one reconciler finds for another.
type wakeups struct {
	targets  queueRef[TargetKey]
	runs     queueRef[reconcile.Request]
	policies map[string]*queueRef[reconcile.Request]
	registry *policy.Registry
	watches  *watch.Manager
}

func newWakeups(registry *policy.Registry) *wakeups {
	return &wakeups{registry: registry,
		policies: map[string]*queueRef[reconcile.Request]{policy.KindNamespaced: {}, policy.KindCluster: {}}}
}

// enqueueTargets queues every cached object of gvk in namespace (empty: all).
func (w *wakeups) enqueueTargets(gvk schema.GroupVersionKind, namespace string) {
	for _, o := range w.watches.List(gvk, namespace) {
		w.targets.Add(NewTargetKey(gvk, o.Namespace, o.Name))
	}
}

// recount queues a status recount of the policy that owns finalizer on objects in namespace ns.
func (w *wakeups) recount(finalizer, ns string) {
	if pkey, ok := w.registry.ForFinalizer(finalizer, ns); ok {
		w.recountPolicy(pkey)
	}
}

// recountPolicy queues a status recount of one policy, folded with others within recountDelay.
func (w *wakeups) recountPolicy(pkey policy.Key) {
	if q := w.policies[pkey.Kind]; q != nil {
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pkey.Namespace, Name: pkey.Name}}, recountDelay)
	}
}

// FieldManager is the field manager of the engine's writes. A run's status written by any other
// manager is not trusted (TeardownRun has no status subresource: see trusted).
const FieldManager = "teardown-operator"

// trusted checks that a run's spec is one the engine could have written: its finalizer is its
// policy's, it lives in its target's namespace or the run namespace, and a TeardownPolicy's run
// targets that policy's namespace; and that only the engine wrote its status. The engine acts with
// its own rights on the target a run names, so a hand-made or hand-edited run must not be able to
// remove any finalizer from any object.
func trusted(runNamespace string, run *v1alpha1.TeardownRun) error {
	ref, t := run.Spec.PolicyRef, run.Spec.Target
	if m := foreignStatusWriter(run); m != "" {
		return fmt.Errorf("its status was written by field manager %q: only the operator writes a run's status", m)
	}
	switch {
	case run.Spec.Finalizer != naming.Finalizer(ref.Kind, ref.Name):
		return fmt.Errorf("spec.finalizer %q is not the finalizer of %s %s", run.Spec.Finalizer, ref.Kind, ref.Name)
	case run.Namespace != t.Namespace && run.Namespace != runNamespace:
		return fmt.Errorf("a run lives in its target's namespace or in %s, not %s", runNamespace, run.Namespace)
	case ref.Kind == policy.KindNamespaced && t.Namespace != ref.Namespace:
		return fmt.Errorf("a TeardownPolicy's run can only target its own namespace %q", ref.Namespace)
	case ref.Kind == policy.KindCluster && ref.Namespace != "":
		return fmt.Errorf("spec.policyRef.namespace must be empty for a ClusterTeardownPolicy")
	}
	return nil
}
