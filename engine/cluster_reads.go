package engine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// clusterReads are the cached reads several reconcilers make: runs by target and by policy, and
// namespaces. Each reconciler names the few services it uses rather than the whole engine (see the
// reconciler types).
type clusterReads struct {
	client client.Client
	// runs is the run informer's own indexer (see indexRuns), read directly: a lookup by target
	// UID comes with every target event and every target reconcile, and the cache reader's List
	// (a field selector parsed, a list built by reflection) was 4-5% of the operator's CPU.
	runs toolscache.Indexer
	// admission reads the admission policy that checks requests from the API server, each time a
	// request is read (requests.go): an answer kept for even a second would trust a request
	// written in the second after the policy was deleted. Requests are read only while their
	// annotation is set.
	admission client.Reader
}

// runIndexers index the cached runs by target UID and by policy key.
var runIndexers = toolscache.Indexers{
	indexTargetUID: func(o any) ([]string, error) {
		run, ok := o.(*v1alpha1.TeardownRun)
		if !ok {
			return nil, fmt.Errorf("indexing runs: a %T is not a TeardownRun", o)
		}
		return []string{string(run.Spec.Target.UID)}, nil
	},
	indexPolicy: func(o any) ([]string, error) {
		run, ok := o.(*v1alpha1.TeardownRun)
		if !ok {
			return nil, fmt.Errorf("indexing runs: a %T is not a TeardownRun", o)
		}
		return []string{policy.KeyOf(run.Spec.PolicyRef).String()}, nil
	},
}

// runsOfTarget returns the cached runs of a target. They are the cache's own objects (no deep
// copy: a policy recount reads every run of the policy): callers only read them.
func (c clusterReads) runsOfTarget(_ context.Context, uid types.UID) []v1alpha1.TeardownRun {
	runs, _ := c.runsBy(indexTargetUID, string(uid))
	return runs
}

// runsOfPolicy returns the cached runs of a policy; like runsOfTarget, read only.
func (c clusterReads) runsOfPolicy(_ context.Context, key policy.Key) ([]v1alpha1.TeardownRun, error) {
	return c.runsBy(indexPolicy, key.String())
}

func (c clusterReads) runsBy(index, value string) ([]v1alpha1.TeardownRun, error) {
	objs, err := c.runs.ByIndex(index, value)
	if err != nil {
		return nil, fmt.Errorf("cached runs by %s: %w", index, err)
	}
	runs := make([]v1alpha1.TeardownRun, 0, len(objs))
	for _, o := range objs {
		if run, ok := o.(*v1alpha1.TeardownRun); ok {
			runs = append(runs, *run)
		}
	}
	return runs, nil
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

// policyOfFinalizerExists reports whether a policy that a teardown finalizer names exists, in
// the cache, compiled or not; a policy of namespace ns or a cluster policy. A read that fails
// counts as existing: a finalizer is never dropped on a guess.
func (c clusterReads) policyOfFinalizerExists(ctx context.Context, finalizer, ns string) bool {
	var nsList v1alpha1.TeardownPolicyList
	if ns != "" {
		if err := c.client.List(ctx, &nsList, client.InNamespace(ns)); err != nil {
			return true
		}
	}
	for _, p := range nsList.Items {
		if naming.Finalizer(policy.KindNamespaced, p.Name) == finalizer {
			return true
		}
	}
	var cl v1alpha1.ClusterTeardownPolicyList
	if err := c.client.List(ctx, &cl); err != nil {
		return true
	}
	for _, p := range cl.Items {
		if naming.Finalizer(policy.KindCluster, p.Name) == finalizer {
			return true
		}
	}
	return false
}

// readObject reads the whole object key names from the API server; nil means it is gone.
func readObject(ctx context.Context, reader client.Reader, key TargetKey) (map[string]any, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(key.GVK())
	if err := reader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	return u.Object, nil
}
