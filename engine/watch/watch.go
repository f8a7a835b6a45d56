// Package watch runs one metadata-only informer per kind that some consumer (a policy naming a
// target kind, a run waiting on a lookup) needs, shares it between consumers, and stops it when
// the last consumer lets go. Metadata informers keep the memory per object small whatever the
// kind's size; full objects are read only when a CEL expression needs them.
package watch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// Event is a change to a watched object.
type Event struct {
	GVK    schema.GroupVersionKind
	Object *metav1.PartialObjectMetadata
	// Old is the previous version on an update, nil otherwise.
	Old     *metav1.PartialObjectMetadata
	Deleted bool
}

// ErrNotStarted is returned by Acquire before the manager runs (just after start-up).
var ErrNotStarted = errors.New("watch manager not started")

// Handler receives every event of every informer. It must not block.
type Handler func(Event)

// Manager owns the dynamic informers.
type Manager struct {
	client  metadata.Interface
	mapper  meta.RESTMapper
	handler Handler
	resync  time.Duration
	log     logr.Logger

	mu      sync.Mutex
	ctx     context.Context
	entries map[schema.GroupVersionKind]*entry
	shared  *interner
	// unserved hears of a kind whose list or watch the API server answers with NotFound: its
	// resource is no longer served (its CRD was removed), which the REST mapper, which caches
	// discovery, does not know.
	unserved func(schema.GroupVersionKind)
}

type entry struct {
	informer  cache.SharedIndexInformer
	mapping   *meta.RESTMapping
	stop      context.CancelFunc
	consumers map[string]struct{}
	// notFound is when the API server first answered the informer's list or watch with NotFound,
	// since it last served the kind; zero while it serves it.
	notFound time.Time
}

// NewManager returns a manager; Start must be called before Acquire starts informers.
func NewManager(client metadata.Interface, mapper meta.RESTMapper, handler Handler, resync time.Duration, log logr.Logger) *Manager {
	return &Manager{client: client, mapper: mapper, handler: handler, resync: resync, log: log,
		entries: map[schema.GroupVersionKind]*entry{}, shared: newInterner()}
}

// Start records the context informers run under and blocks until it ends, then stops them all.
// It implements manager.Runnable, and needs leader election like the controllers that use it.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	defer m.mu.Unlock()
	for gvk, e := range m.entries {
		e.stop()
		delete(m.entries, gvk)
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (m *Manager) NeedLeaderElection() bool { return true }

// Mapping resolves a kind to its resource, or says it is not served.
func (m *Manager) Mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	mapping, err := m.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("kind %s is not served by the cluster: %w", gvk, err)
	}
	return mapping, nil
}

// Acquire makes sure an informer for gvk runs, held by consumer. It does not wait for the informer
// to sync; Synced tells.
func (m *Manager) Acquire(gvk schema.GroupVersionKind, consumer string) (*meta.RESTMapping, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[gvk]; ok {
		e.consumers[consumer] = struct{}{}
		return e.mapping, nil
	}
	if m.ctx == nil {
		return nil, ErrNotStarted
	}
	mapping, err := m.Mapping(gvk)
	if err != nil {
		return nil, err
	}
	inf := metadatainformer.NewFilteredMetadataInformer(m.client, mapping.Resource, metav1.NamespaceAll, m.resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil).Informer()
	if err := inf.SetTransform(m.transform); err != nil {
		return nil, err
	}
	if err := inf.SetWatchErrorHandlerWithContext(m.watchError(gvk)); err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(m.handlerFuncs(gvk)); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(m.ctx)
	e := &entry{informer: inf, mapping: mapping, stop: cancel, consumers: map[string]struct{}{consumer: {}}}
	m.entries[gvk] = e
	go inf.RunWithContext(ctx)
	m.log.Info("started watch", "kind", gvk.String(), "resource", mapping.Resource.String())
	return mapping, nil
}

// OnUnserved sets f to hear of a watched kind that the API server stops serving (NotFound to the
// informer's list or watch). Set it before Start.
func (m *Manager) OnUnserved(f func(schema.GroupVersionKind)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unserved = f
}

// watchError records a NotFound answer to gvk's informer, telling OnUnserved's function the first
// time, then logs the error as the informer would.
func (m *Manager) watchError(gvk schema.GroupVersionKind) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, r *cache.Reflector, err error) {
		if apierrors.IsNotFound(err) {
			m.mu.Lock()
			e, ok := m.entries[gvk]
			first := ok && e.notFound.IsZero()
			if first {
				e.notFound = time.Now()
			}
			f := m.unserved
			m.mu.Unlock()
			if first {
				m.log.Info("watched kind is not served any more", "kind", gvk.String(), "error", err.Error())
				if f != nil {
					f(gvk)
				}
			}
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}
}

// NotFoundSince returns when the API server started answering gvk's informer with NotFound, and
// whether it does; the kind may be served again since (MarkServed forgets it).
func (m *Manager) NotFoundSince(gvk schema.GroupVersionKind) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[gvk]; ok && !e.notFound.IsZero() {
		return e.notFound, true
	}
	return time.Time{}, false
}

// MarkServed forgets a NotFound recorded for gvk, once discovery says the kind is served again:
// the informer recovers by itself on its next try.
func (m *Manager) MarkServed(gvk schema.GroupVersionKind) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[gvk]; ok {
		e.notFound = time.Time{}
	}
}

// Release lets go of consumer's hold on gvk; the informer stops when no consumer holds it.
func (m *Manager) Release(gvk schema.GroupVersionKind, consumer string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[gvk]
	if !ok {
		return
	}
	delete(e.consumers, consumer)
	if len(e.consumers) == 0 {
		e.stop()
		delete(m.entries, gvk)
		m.log.Info("stopped watch", "kind", gvk.String())
	}
}

// Held reports whether consumer holds gvk.
func (m *Manager) Held(gvk schema.GroupVersionKind, consumer string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[gvk]
	if !ok {
		return false
	}
	_, held := e.consumers[consumer]
	return held
}

// Watching reports whether an informer for gvk runs.
func (m *Manager) Watching(gvk schema.GroupVersionKind) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.entries[gvk]
	return ok
}

// Resource returns the resource of a watched kind, as resolved when its watch started, without
// asking the REST mapper (which allocates a list of candidate mappings on every call).
func (m *Manager) Resource(gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[gvk]; ok {
		return e.mapping.Resource, true
	}
	return schema.GroupVersionResource{}, false
}

// Synced reports whether gvk's informer has listed every object once.
func (m *Manager) Synced(gvk schema.GroupVersionKind) bool {
	inf := m.informer(gvk)
	return inf != nil && inf.HasSynced()
}

func (m *Manager) informer(gvk schema.GroupVersionKind) cache.SharedIndexInformer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[gvk]; ok {
		return e.informer
	}
	return nil
}

// Get returns the cached metadata of one object. The result must not be modified.
func (m *Manager) Get(gvk schema.GroupVersionKind, namespace, name string) (*metav1.PartialObjectMetadata, bool) {
	inf := m.informer(gvk)
	if inf == nil {
		return nil, false
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, ok, err := inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil, false
	}
	return obj.(*metav1.PartialObjectMetadata), true
}

// List returns the cached metadata of every object of gvk in namespace (empty: all). The results
// must not be modified.
func (m *Manager) List(gvk schema.GroupVersionKind, namespace string) []*metav1.PartialObjectMetadata {
	inf := m.informer(gvk)
	if inf == nil {
		return nil
	}
	var objs []any
	if namespace == "" {
		objs = inf.GetStore().List()
	} else {
		objs, _ = inf.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	}
	out := make([]*metav1.PartialObjectMetadata, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*metav1.PartialObjectMetadata))
	}
	return out
}

func (m *Manager) handlerFuncs(gvk schema.GroupVersionKind) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(*metav1.PartialObjectMetadata); ok {
				m.handler(Event{GVK: gvk, Object: o})
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok := newObj.(*metav1.PartialObjectMetadata)
			old, _ := oldObj.(*metav1.PartialObjectMetadata)
			if ok {
				m.handler(Event{GVK: gvk, Object: o, Old: old})
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(*metav1.PartialObjectMetadata); ok {
				m.handler(Event{GVK: gvk, Object: o, Deleted: true})
			}
		},
	}
}

// transform is what the informers keep of an object: trimmed, sharing what it has in common with
// the others.
func (m *Manager) transform(obj any) (any, error) {
	if o, ok := obj.(*metav1.PartialObjectMetadata); ok {
		trimMetadata(o)
		m.shared.object(o)
	}
	return obj, nil
}

// trimMetadata drops from a cached object what the engine never reads from the cache (the
// engine reads the whole object from the API server when it needs more than labels, finalizers,
// its own annotations and the deletion timestamp). Managed fields are most of an object's
// metadata; client-side kubectl apply keeps the whole object, as applied, in an annotation.
func trimMetadata(o *metav1.PartialObjectMetadata) {
	o.ManagedFields = nil
	delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
}
