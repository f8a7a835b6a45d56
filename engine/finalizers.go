package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// writeFinalizers replaces the finalizers of the object whose metadata (as read) is obj. The patch
// carries obj's resourceVersion, so the API server rejects it with a conflict if anyone changed
// the object since it was read: a JSON merge patch replaces the whole list, and without the lock a
// finalizer another controller added in between would be dropped.
func (e *Engine) writeFinalizers(ctx context.Context, gvk schema.GroupVersionKind, obj *metav1.PartialObjectMetadata, finalizers []string) error {
	if finalizers == nil {
		finalizers = []string{}
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": obj.ResourceVersion,
		"finalizers":      finalizers,
	}})
	if err != nil {
		return err
	}
	target := &metav1.PartialObjectMetadata{}
	target.SetGroupVersionKind(gvk)
	target.SetNamespace(obj.Namespace)
	target.SetName(obj.Name)
	return e.client.Patch(ctx, target, client.RawPatch(types.MergePatchType, data))
}

// maxConflictRetries bounds the immediate re-reads when a finalizer removal races other writers;
// past it the caller's reconcile is requeued.
const maxConflictRetries = 5

// removeFinalizer removes one finalizer from an object read fresh from the API server. It reports
// whether the object still exists.
func (e *Engine) removeFinalizer(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string, uid types.UID, finalizer string) (bool, error) {
	for range maxConflictRetries {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		if err := e.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return false, err
		}
		if uid != "" && obj.UID != uid {
			return false, nil // a new object with the same name: not ours to touch
		}
		if !slices.Contains(obj.Finalizers, finalizer) {
			return true, nil
		}
		kept := slices.DeleteFunc(slices.Clone(obj.Finalizers), func(f string) bool { return f == finalizer })
		err := e.writeFinalizers(ctx, gvk, obj, kept)
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err):
			return true, err
		}
	}
	return true, fmt.Errorf("removing finalizer %s from %s %s/%s: still conflicting after %d tries", finalizer, gvk.Kind, namespace, name, maxConflictRetries)
}
