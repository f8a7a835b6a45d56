package lookup

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// APILister reads full objects straight from the API server for lookups. Lookups are rare
// and bounded, so they are not cached: caching every kind a lookup might name would cost memory
// for objects nobody reads.
type APILister struct {
	reader client.Reader
	mapper meta.RESTMapper
}

// Namespaced implements Lister.
func (l *APILister) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	m, err := l.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false, fmt.Errorf("kind %s is not served: %w", gvk, err)
	}
	return m.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// List implements Lister.
func (l *APILister) List(ctx context.Context, gvk schema.GroupVersionKind, namespace string, selector labels.Selector, limit int) ([]any, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: selector}, client.Limit(int64(limit + 1))}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	if err := l.reader.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
	}
	if len(list.Items) > limit || list.GetContinue() != "" {
		return nil, ErrTooMany
	}
	out := make([]any, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, list.Items[i].Object)
	}
	return out, nil
}

// NewAPILister returns a Lister reading through reader, with kinds' scopes from mapper.
func NewAPILister(reader client.Reader, mapper meta.RESTMapper) *APILister {
	return &APILister{reader: reader, mapper: mapper}
}
