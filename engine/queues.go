package engine

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
	"github.com/teardown-dev/teardown-operator/steps"
)

// queueRef hands a controller's queue to code outside the controller (informer handlers, other
// reconcilers). Items added before the controller starts are kept and queued when it does.
type queueRef[T comparable] struct {
	mu      sync.Mutex
	q       workqueue.TypedRateLimitingInterface[T]
	pending []T
}

func (r *queueRef[T]) source() source.TypedSource[T] {
	return source.TypedFunc[T](func(_ context.Context, q workqueue.TypedRateLimitingInterface[T]) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.q = q
		for _, item := range r.pending {
			q.Add(item)
		}
		r.pending = nil
		return nil
	})
}

// Add queues item now.
func (r *queueRef[T]) Add(item T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.q == nil {
		r.pending = append(r.pending, item)
		return
	}
	r.q.Add(item)
}

// AddAfter queues item after d; the queue folds repeated adds of the same item.
func (r *queueRef[T]) AddAfter(item T, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.q == nil {
		r.pending = append(r.pending, item)
		return
	}
	r.q.AddAfter(item, d)
}

// interest records who (runs waiting in wait steps, objects whose deletion guard looks things up)
// wants to hear of changes to which kinds of objects, in which namespaces.
type interest[K comparable] struct {
	mu    sync.Mutex
	byGVK map[schema.GroupVersionKind]map[string]map[K]struct{} // gvk -> namespace -> who
	byKey map[K][]steps.WatchTarget
}

func newInterest[K comparable]() *interest[K] {
	return &interest[K]{byGVK: map[schema.GroupVersionKind]map[string]map[K]struct{}{}, byKey: map[K][]steps.WatchTarget{}}
}

// set replaces what key watches and returns the kinds it no longer watches.
func (in *interest[K]) set(key K, targets []steps.WatchTarget) (dropped []schema.GroupVersionKind) {
	in.mu.Lock()
	defer in.mu.Unlock()
	keep := map[schema.GroupVersionKind]bool{}
	for _, t := range targets {
		keep[t.GVK] = true
	}
	for _, old := range in.byKey[key] {
		if nss := in.byGVK[old.GVK]; nss != nil {
			delete(nss[old.Namespace], key)
			if len(nss[old.Namespace]) == 0 {
				delete(nss, old.Namespace)
			}
			if len(nss) == 0 {
				delete(in.byGVK, old.GVK)
			}
		}
		if !keep[old.GVK] {
			dropped = append(dropped, old.GVK)
		}
	}
	if len(targets) == 0 {
		delete(in.byKey, key)
		return dropped
	}
	in.byKey[key] = targets
	for _, t := range targets {
		nss := in.byGVK[t.GVK]
		if nss == nil {
			nss = map[string]map[K]struct{}{}
			in.byGVK[t.GVK] = nss
		}
		if nss[t.Namespace] == nil {
			nss[t.Namespace] = map[K]struct{}{}
		}
		nss[t.Namespace][key] = struct{}{}
	}
	return dropped
}

// interested returns who watches changes to gvk objects in namespace.
func (in *interest[K]) interested(gvk schema.GroupVersionKind, namespace string) []K {
	in.mu.Lock()
	defer in.mu.Unlock()
	nss := in.byGVK[gvk]
	if nss == nil {
		return nil
	}
	var out []K
	for k := range nss[namespace] {
		out = append(out, k)
	}
	if namespace != "" {
		for k := range nss[""] {
			out = append(out, k)
		}
	}
	return out
}

// track makes the kinds key watches (targets) watched by the watch manager, under consumer,
// and releases those it no longer watches.
func (in *interest[K]) track(watches *watch.Manager, key K, consumer string, targets []steps.WatchTarget) {
	for _, gvk := range in.set(key, targets) {
		watches.Release(gvk, consumer)
	}
	for _, t := range targets {
		if !watches.Held(t.GVK, consumer) {
			if _, err := watches.Acquire(t.GVK, consumer); err != nil {
				ctrl.Log.Info("cannot watch a looked-up kind; relying on the check interval or the object's own changes",
					"kind", t.GVK.String(), "consumer", consumer, "error", err.Error())
			}
		}
	}
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

// recountSelecting queues a status recount of the policies of kind gvk whose label selector
// selects an object of namespace ns with those labels.
func (w *wakeups) recountSelecting(gvk schema.GroupVersionKind, ns string, objLabels map[string]string) {
	for _, p := range w.registry.ForGVK(gvk) {
		if p.InScope(ns) && p.Selector != nil && p.Selector.Matches(labels.Set(objLabels)) {
			w.recountPolicy(p.Key)
		}
	}
}

// recountPolicy queues a status recount of one policy, folded with others within recountDelay.
func (w *wakeups) recountPolicy(pkey policy.Key) { w.recountPolicyAfter(pkey, recountDelay) }

// recountPolicyAfter queues a status recount of one policy after d.
func (w *wakeups) recountPolicyAfter(pkey policy.Key, d time.Duration) {
	if q := w.policies[pkey.Kind]; q != nil {
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pkey.Namespace, Name: pkey.Name}}, d)
	}
}
