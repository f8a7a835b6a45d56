package engine

import (
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/engine/watch"
)

// servedKinds tells whether a watched target kind is still served. The REST mapper caches
// discovery, so a CRD removed while its kind is watched still maps; the API server answering the
// kind's informer with NotFound is the sign, and discovery, asked afresh, the proof.
type servedKinds struct {
	discovery discovery.DiscoveryInterface
	watches   *watch.Manager
}

// newServedKinds asks discovery with cfg; a kind whose informer is answered NotFound wakes the
// policies that target it.
func (e *Engine) newServedKinds(cfg *rest.Config) (servedKinds, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return servedKinds{}, fmt.Errorf("discovery client: %w", err)
	}
	e.watches.OnUnserved(e.wakePoliciesOf)
	return servedKinds{discovery: dc, watches: e.watches}, nil
}

// gone reports whether gvk is no longer served, and since when its informer has been told so.
// It asks discovery only once the informer was answered NotFound; a discovery error leaves the
// kind served (nothing is decided on a guess).
func (s servedKinds) gone(gvk schema.GroupVersionKind) (time.Time, bool) {
	since, notFound := s.watches.NotFoundSince(gvk)
	if !notFound || s.discovery == nil {
		return time.Time{}, false
	}
	served, err := servesKind(s.discovery, gvk)
	if err != nil {
		return time.Time{}, false
	}
	if served {
		s.watches.MarkServed(gvk)
		return time.Time{}, false
	}
	return since, true
}

// servesKind asks discovery, afresh, whether gvk's group version serves its kind.
func servesKind(dc discovery.DiscoveryInterface, gvk schema.GroupVersionKind) (bool, error) {
	list, err := dc.ServerResourcesForGroupVersion(gvk.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") {
			return true, nil
		}
	}
	return false, nil
}

// wakePoliciesOf queues every policy that targets gvk: its kind stopped being served.
func (e *Engine) wakePoliciesOf(gvk schema.GroupVersionKind) {
	for _, p := range e.registry.ForGVK(gvk) {
		if q := e.wake.policies[p.Key.Kind]; q != nil {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Key.Namespace, Name: p.Key.Name}})
		}
	}
}
