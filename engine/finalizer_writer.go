package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/engine/watch"
)

// metaRef is a metadata-only reference to one object, for metadata reads and patches.
func metaRef(gvk schema.GroupVersionKind, namespace, name string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	m.SetNamespace(namespace)
	m.SetName(name)
	return m
}

// finalizerWriter writes finalizer lists without ever dropping another writer's finalizer.
type finalizerWriter struct {
	client   client.Client
	metadata metadata.Interface
	reader   client.Reader
	watches  *watch.Manager
	// noStrategic holds the built-in kinds the API server refused a strategic merge patch of
	// (an aggregated API, say): their finalizers are removed by JSON patch.
	noStrategic sync.Map
}

// patch patches the metadata of one object and returns its new resourceVersion. A watched kind
// (every target) goes straight to its resource through the metadata client (fenced like the
// manager's, see metadataClient): the client's REST mapper lookup would allocate kilobytes on
// each of the two writes of an object's life.
func (f *finalizerWriter) patch(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string, pt types.PatchType, data []byte) (string, error) {
	if gvr, ok := f.watches.Resource(gvk); ok {
		out, err := f.metadata.Resource(gvr).Namespace(namespace).Patch(ctx, name, pt, data, metav1.PatchOptions{FieldManager: FieldManager})
		if err != nil {
			return "", err
		}
		return out.ResourceVersion, nil
	}
	out := metaRef(gvk, namespace, name)
	if err := f.client.Patch(ctx, out, client.RawPatch(pt, data)); err != nil {
		return "", err
	}
	return out.ResourceVersion, nil
}

// write replaces the finalizers of the object whose metadata (as read) is obj. The patch
// carries obj's resourceVersion, so the API server rejects it with a conflict if anyone changed
// the object since it was read: a JSON merge patch replaces the whole list, and without the lock a
// finalizer another controller added in between would be dropped.
func (f *finalizerWriter) write(ctx context.Context, gvk schema.GroupVersionKind, obj *metav1.PartialObjectMetadata, finalizers []string) (newRV string, err error) {
	if finalizers == nil {
		finalizers = []string{}
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": obj.ResourceVersion,
		"finalizers":      finalizers,
	}})
	if err != nil {
		return "", err
	}
	return f.patch(ctx, gvk, obj.Namespace, obj.Name, types.MergePatchType, data)
}

// conflictRetry is how soon a reconcile that lost a write race runs again, with fresh data.
const conflictRetry = 200 * time.Millisecond

// requeueConflicts makes a reconciler's lost write races (409 Conflict: someone else wrote the
// object since it was read) a quick, quiet requeue with fresh data. They are the normal cost of
// optimistic locking, not failures to log and back off from; in one place, every reconciler can
// return them as the errors they are. A request cut short because the operator is stopping (its
// context cancelled) is not an error either: the next leader reconciles everything as it starts,
// and a clean stop must log no error.
func requeueConflicts[T comparable](r reconcile.TypedReconciler[T]) reconcile.TypedReconciler[T] {
	return reconcile.TypedFunc[T](func(ctx context.Context, req T) (reconcile.Result, error) {
		res, err := r.Reconcile(ctx, req)
		switch {
		case apierrors.IsConflict(err):
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		case err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled):
			ctrl.LoggerFrom(ctx).V(1).Info("reconcile cut short: the operator is stopping", "error", err.Error())
			return reconcile.Result{}, nil
		}
		return res, err
	})
}

// maxConflictRetries bounds the immediate re-reads when a finalizer removal races other writers;
// past it the caller's reconcile is requeued.
const maxConflictRetries = 5

// remove removes one finalizer from an object. The patch (patchOut) carries the object's UID and
// removes that finalizer alone, so it can never take out another writer's finalizer or touch a new
// object of the same name, and it needs no resourceVersion: unrelated updates do not make it fail.
// It starts from the watch cache's copy and reads the API server only when that copy is missing,
// or the patch failed its preconditions (another UID, or a JSON patch's position moved). It
// reports whether the object still exists.
func (f *finalizerWriter) remove(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string, uid types.UID, finalizer string) (bool, error) {
	obj, fromCache := f.watches.Get(gvk, namespace, name)
	for range maxConflictRetries {
		if !fromCache {
			obj = metaRef(gvk, namespace, name)
			if err := f.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				return false, err
			}
		}
		if uid != "" && obj.UID != uid {
			if fromCache { // the cache may hold an older object of that name: ask the API server
				fromCache = false
				continue
			}
			return false, nil // a new object with the same name: not ours to touch
		}
		fromCache = false
		_, err := f.patchOut(ctx, gvk, obj, finalizer)
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsInvalid(err) && !apierrors.IsConflict(err):
			return true, err
		}
		// The test failed: the list moved since obj was read. Read it again.
	}
	return true, fmt.Errorf("removing finalizer %s from %s %s/%s: the finalizer list kept changing (%d tries)", finalizer, gvk.Kind, namespace, name, maxConflictRetries)
}

// patchOut removes finalizer from the object obj describes, if obj still carries it,
// and returns the object's new resourceVersion (empty when there was nothing to remove).
func (f *finalizerWriter) patchOut(ctx context.Context, gvk schema.GroupVersionKind, obj *metav1.PartialObjectMetadata, finalizer string) (string, error) {
	i := slices.Index(obj.Finalizers, finalizer)
	if i < 0 {
		return "", nil
	}
	if f.strategic(gvk) {
		rv, err := f.strategicOut(ctx, gvk, obj, finalizer)
		if !apierrors.IsUnsupportedMediaType(err) {
			return rv, err
		}
		f.noStrategic.Store(gvk, true)
	}
	ops := []map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": obj.UID},
		{"op": "test", "path": fmt.Sprintf("/metadata/finalizers/%d", i), "value": finalizer},
		{"op": "remove", "path": fmt.Sprintf("/metadata/finalizers/%d", i)},
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return "", err
	}
	return f.patch(ctx, gvk, obj.Namespace, obj.Name, types.JSONPatchType, data)
}

// strategic reports whether the finalizers of kind gvk are removed by strategic merge patch: a
// kind the API server itself serves (custom resources take none).
func (f *finalizerWriter) strategic(gvk schema.GroupVersionKind) bool {
	_, refused := f.noStrategic.Load(gvk)
	return !refused && clientgoscheme.Scheme.Recognizes(gvk)
}

// strategicOut removes finalizer by value, wherever it is in the list, with a strategic merge
// patch. It costs the API server less than the JSON patch (measured in a teardown: the JSON patch
// encodes the stored object to JSON and decodes it back), and needs no position: others' changes to
// the list do not make it fail. The UID it carries is a precondition: the API server refuses a
// patch that would change it (422, as a failed JSON patch test), so a new object of the same name
// is never touched.
func (f *finalizerWriter) strategicOut(ctx context.Context, gvk schema.GroupVersionKind, obj *metav1.PartialObjectMetadata, finalizer string) (string, error) {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": obj.UID, "$deleteFromPrimitiveList/finalizers": []string{finalizer},
	}})
	if err != nil {
		return "", err
	}
	return f.patch(ctx, gvk, obj.Namespace, obj.Name, types.StrategicMergePatchType, data)
}
