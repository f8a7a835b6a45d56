package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
)

// Bounds of a drain.
const (
	// drainPage is how many objects one list call reads.
	drainPage = 500
	// drainTries is how often an object that changed under a release is read and tried again.
	drainTries = 5
)

// drainer releases matching finalizers, kind by kind, reading metadata only.
type drainer struct {
	kube        *kube
	out, errOut io.Writer
	match       drained
	dryRun      bool
	// liftGuards removes deletion guards' verdicts too (drain --all): with the operator gone,
	// nothing would ever lift them.
	liftGuards          bool
	mc                  metadata.Interface
	objects, finalizers int
	// vetoes counts the deletion guards' verdicts lifted.
	vetoes int
	// unread names the API groups discovery could not list: their objects were not drained.
	unread string
}

// allKinds lists every kind whose objects can be listed and patched.
func (d *drainer) allKinds() ([]schema.GroupVersionResource, error) {
	dc, err := d.kube.flags.ToDiscoveryClient()
	if err != nil {
		return nil, usageError("discovery: %v", err)
	}
	// A kind missing from a stale discovery cache (say, a CRD installed since it was written)
	// would keep its objects' finalizers: ask the API server afresh.
	dc.Invalidate()
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		if len(lists) == 0 {
			return nil, apiError(err)
		}
		d.unread = oneLine(err.Error())
	}
	var out []schema.GroupVersionResource
	for _, l := range discovery.FilteredBy(discovery.SupportsAllVerbs{Verbs: []string{"list", "patch"}}, lists) {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, res := range l.APIResources {
			if !strings.Contains(res.Name, "/") {
				out = append(out, gv.WithResource(res.Name))
			}
		}
	}
	return out, nil
}

// drainKinds releases the matching finalizers of every object of the kinds, kind by kind.
func (d *drainer) drainKinds(ctx context.Context, kinds []schema.GroupVersionResource) error {
	for _, gvr := range kinds {
		if err := d.drainKind(ctx, gvr); err != nil {
			return err
		}
	}
	return nil
}

// releasePolicy removes the operator's own finalizer from a policy being deleted, once its
// objects are drained: with its objects released, nothing is left for it to wait for.
func (d *drainer) releasePolicy(ctx context.Context, view *policy.View) error {
	p := view.Object
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: p.GetNamespace(), Name: p.GetName(),
		ResourceVersion: p.GetResourceVersion(), Finalizers: p.GetFinalizers(), DeletionTimestamp: p.GetDeletionTimestamp()}}
	own := *d
	own.match = func(f, _ string) bool { return f == v1alpha1.FinalizerPolicy }
	own.liftGuards = false
	if err := own.init(); err != nil {
		return err
	}
	if err := own.release(ctx, policyResource(view.Key.Kind), obj); err != nil {
		return err
	}
	d.objects, d.finalizers = own.objects, own.finalizers
	return nil
}

// init makes the metadata client, once.
func (d *drainer) init() error {
	if d.mc != nil {
		return nil
	}
	mc, err := metadata.NewForConfig(d.kube.cfg)
	if err != nil {
		return err
	}
	d.mc = mc
	return nil
}

// drainKind releases the matching finalizers of every object of one kind, page by page.
func (d *drainer) drainKind(ctx context.Context, gvr schema.GroupVersionResource) error {
	if err := d.init(); err != nil {
		return err
	}
	opts := metav1.ListOptions{Limit: drainPage}
	for {
		list, err := d.mc.Resource(gvr).List(ctx, opts)
		if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
			return nil
		}
		if err != nil {
			return apiError(fmt.Errorf("listing %s: %w", gvr.GroupResource(), err))
		}
		for i := range list.Items {
			if err := d.release(ctx, gvr, &list.Items[i]); err != nil {
				return err
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return nil
		}
	}
}

// release removes one object's matching finalizers, keeping every other controller's; a
// conflict (the object changed) reads it again.
func (d *drainer) release(ctx context.Context, gvr schema.GroupVersionResource, obj *metav1.PartialObjectMetadata) error {
	for try := 0; ; try++ {
		keep := slices.DeleteFunc(slices.Clone(obj.Finalizers), func(f string) bool { return d.match(f, obj.Namespace) })
		lift := d.liftGuards && obj.Labels[v1alpha1.LabelDeletionGuard] != ""
		if len(keep) == len(obj.Finalizers) && !lift {
			return nil
		}
		gone := len(obj.Finalizers) - len(keep)
		if !d.dryRun {
			err := d.patch(ctx, gvr, obj, keep, lift)
			if apierrors.IsConflict(err) && try < drainTries {
				if obj, err = d.mc.Resource(gvr).Namespace(obj.Namespace).Get(ctx, obj.Name, metav1.GetOptions{}); err != nil {
					return ignoreNotFound(err)
				}
				continue
			}
			if err = ignoreNotFound(err); err != nil {
				return apiError(fmt.Errorf("releasing %s %s: %w", gvr.GroupResource(), nameOf(obj), err))
			}
		}
		d.report(gvr, obj, keep, lift)
		d.objects++
		d.finalizers += gone
		if lift {
			d.vetoes++
		}
		return nil
	}
}

func (d *drainer) patch(ctx context.Context, gvr schema.GroupVersionResource, obj *metav1.PartialObjectMetadata, keep []string, lift bool) error {
	if keep == nil {
		keep = []string{}
	}
	// The resource version makes the patch fail on a change since the read, so a finalizer
	// another controller added meanwhile is not dropped.
	md := map[string]any{"resourceVersion": obj.ResourceVersion, "finalizers": keep}
	if lift {
		md["labels"] = map[string]any{v1alpha1.LabelDeletionGuard: nil}
		md["annotations"] = map[string]any{v1alpha1.AnnotationDeletionGuardMessage: nil}
	}
	body, err := json.Marshal(map[string]any{"metadata": md})
	if err != nil {
		return err
	}
	_, err = d.mc.Resource(gvr).Namespace(obj.Namespace).Patch(ctx, obj.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "kubectl-teardown"})
	return err
}

func (d *drainer) report(gvr schema.GroupVersionResource, obj *metav1.PartialObjectMetadata, keep []string, lift bool) {
	var released []string
	for _, f := range obj.Finalizers {
		if !slices.Contains(keep, f) {
			released = append(released, f)
		}
	}
	if lift {
		released = append(released, "the deletion guard's veto ("+v1alpha1.LabelDeletionGuard+")")
	}
	verb, note := "released", ""
	if d.dryRun {
		verb = "would release"
	}
	if obj.DeletionTimestamp != nil {
		note = " (being deleted: its deletion completes now)"
		if d.dryRun {
			note = " (being deleted: its deletion would complete)"
		}
		if len(keep) > 0 {
			note = fmt.Sprintf(" (being deleted: still held by %s)", strings.Join(keep, ", "))
		}
	}
	fmt.Fprintf(d.out, "%s %s from %s %s%s\n", verb, strings.Join(released, ", "), gvr.GroupResource(), nameOf(obj), note)
}

func nameOf(obj *metav1.PartialObjectMetadata) string {
	if obj.Namespace != "" {
		return obj.Namespace + "/" + obj.Name
	}
	return obj.Name
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
