package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
)

// policyCounter counts what a policy's status reports (the objects that carry its finalizer, its
// runs, the objects its match fails on) and keeps the policies' gauges.
type policyCounter struct {
	// watches is the target cache; reader counts from the API server before a policy lets go.
	watches   *watch.Manager
	reader    client.Reader
	reads     clusterReads
	matchErrs *policyObjects
	rejects   *policyObjects
	metrics   *metrics
	// history are the teardowns that ended and are not in the policies' status yet.
	history    *teardownHistory
	stuckAfter time.Duration
}

// runs counts the policy's active and stuck runs, now.
func (c *policyCounter) runs(ctx context.Context, key policy.Key) (runCounts, error) {
	runs, err := c.reads.runsOfPolicy(ctx, key)
	if err != nil {
		return runCounts{}, err
	}
	return countRuns(runs, time.Now(), c.stuckAfter), nil
}

// gauges sets the policy's gauges from its status; a policy being deleted reports only what it
// still protects.
func (c *policyCounter) gauges(key policy.Key, st v1alpha1.TeardownPolicyStatus, deleting bool) {
	label := key.String()
	c.metrics.protected.WithLabelValues(label).Set(float64(st.Protected))
	if !deleting {
		c.metrics.activeRuns.WithLabelValues(label).Set(float64(st.ActiveRuns))
		c.metrics.stuckRuns.WithLabelValues(label).Set(float64(st.StuckRuns))
		c.metrics.matchErrors.WithLabelValues(label).Set(float64(st.MatchErrors))
	}
}

// forget drops the gauges and match errors of a policy that is gone.
func (c *policyCounter) forget(key policy.Key) {
	c.metrics.forget(key.String())
	c.matchErrs.forgetPolicy(key)
	c.rejects.forgetPolicy(key)
	c.history.forget(key)
}

// setUnarmed sets the policy's teardown_unarmed_objects.
func (c *policyCounter) setUnarmed(key policy.Key, n int) {
	c.metrics.unarmed.WithLabelValues(key.String()).Set(float64(n))
}

// protected counts the cached objects in the policy's scope that carry its finalizer.
func (c *policyCounter) protected(gvk schema.GroupVersionKind, key policy.Key, finalizer string) int {
	n, _ := c.targets(context.Background(), gvk, key, finalizer, nil)
	return n
}

// targets counts, in one pass over the cached objects in the policy's scope, those that carry
// its finalizer (protected) and, when p is given and arms objects, those p selects by labels and
// namespace that do not carry it (unarmed): not being deleted, not made by a step, and not
// rejected by its match the last time the operator looked (an object not looked at yet counts).
func (c *policyCounter) targets(ctx context.Context, gvk schema.GroupVersionKind, key policy.Key, finalizer string, p *policy.Compiled) (protected, unarmed int) {
	if p != nil && (p.Suspended || p.Deleting || p.Pipeline == nil) {
		p = nil
	}
	nsLabels := map[string]map[string]string{}
	for _, o := range c.watches.List(gvk, key.Namespace) {
		if slices.Contains(o.Finalizers, finalizer) {
			protected++
			continue
		}
		if p == nil || o.DeletionTimestamp != nil {
			continue
		}
		if p.NamespaceSelector != nil && o.Namespace != "" && nsLabels[o.Namespace] == nil {
			ns, err := c.reads.namespace(ctx, o.Namespace)
			if err != nil {
				continue
			}
			nsLabels[o.Namespace] = ns.Labels
			if ns.Labels == nil {
				nsLabels[o.Namespace] = map[string]string{}
			}
		}
		if p.Selects(o.Labels, nsLabels[o.Namespace], o.Namespace != "") && !c.rejects.has(p.Key, NewTargetKey(gvk, o.Namespace, o.Name)) {
			unarmed++
		}
	}
	return protected, unarmed
}

// protectedLive counts, from the API server, the objects of gvk in namespace (empty: all)
// that carry finalizer. It pages through metadata only.
func (c *policyCounter) protectedLive(ctx context.Context, gvk schema.GroupVersionKind, namespace, finalizer string) (int, error) {
	n := 0
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.Limit(500)}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	for {
		if err := c.reader.List(ctx, list, opts...); err != nil {
			return 0, fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		for _, o := range list.Items {
			if slices.Contains(o.Finalizers, finalizer) {
				n++
			}
		}
		if list.Continue == "" {
			return n, nil
		}
		opts = append(opts, client.Continue(list.Continue))
	}
}
