package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// Two-phase delete (spec.trigger DeleteRequest): the policy's objects are armed with a veto (the
// verdict DenyAlways, which the admission policy enforces), a delete request starts the pipeline
// with the object alive, and the operator deletes the object once the pipeline succeeded. The
// policy's finalizer stays on the object all along: should the object be deleted some other way
// (no admission policy installed), the pipeline still runs before it goes, as with the trigger
// Finalizer.

// deleteRequest says who requests the deletion of obj: the delete-requested annotation, the
// object's own deletion, or its namespace's; "" means nobody does, and untrusted then says why a
// delete-requested annotation on it is not acted on. With verify, the annotation counts only as the
// admission policy teardown.dev-requests admitted it (readRequest), which takes obj read from the
// API server with its managed fields; without, its presence is enough: a run that goes on had its
// request verified when it started, and only a withdrawal matters then.
func (c clusterReads) deleteRequest(ctx context.Context, obj client.Object, verify bool) (who, untrusted string) {
	if obj.GetDeletionTimestamp() != nil {
		return "the deletion of the object", ""
	}
	if v, ok := obj.GetAnnotations()[v1alpha1.AnnotationDeleteRequested]; ok {
		if !verify {
			return fmt.Sprintf("annotation %s=%q", v1alpha1.AnnotationDeleteRequested, v), ""
		}
		req, _ := c.readRequest(ctx, obj, v1alpha1.AnnotationDeleteRequested)
		if req.untrusted == "" {
			return req.who, ""
		}
		untrusted = req.untrusted
	}
	if c.namespaceTerminating(ctx, obj.GetNamespace()) {
		return "the deletion of namespace " + obj.GetNamespace(), ""
	}
	return "", untrusted
}

// armed reports whether a two-phase policy's veto is on obj: the policy protects it, nobody
// broke glass on it (the abandon annotation lifts the veto, so that a plain delete goes through),
// its pipeline has not succeeded (the run that deletes it lifts the veto for its DELETE), and it
// is not an invalid policy being deleted.
func armed(p *policy.Compiled, obj metav1.Object, want map[string]bool) bool {
	ann := obj.GetAnnotations()
	if p.Deleting && p.Pipeline == nil {
		return false // being deleted and invalid: nothing can run, so nothing is held for it
	}
	return p.TwoPhase() && p.InScope(obj.GetNamespace()) && want[p.Finalizer] && ann[v1alpha1.AnnotationAbandon] == "" &&
		ann[v1alpha1.AnnotationDeletedByRun] != naming.RunName(p.Key.Kind, p.Key.Namespace, p.Key.Name, obj.GetName(), obj.GetUID())
}

// armingMessage is what a refused plain delete of an armed object says.
func armingMessage(p policy.Key, key TargetKey, requested bool) string {
	if requested {
		return fmt.Sprintf("%s: deletion requested; the operator deletes the object once its teardown pipeline succeeded (kubectl teardown status %s)", p, objectArg(key))
	}
	return fmt.Sprintf("%s: this object is deleted after its teardown pipeline: request it with `kubectl teardown delete %s --reason <why>` or annotate it %s=\"<your user name>: <why>\"",
		p, objectArg(key), v1alpha1.AnnotationDeleteRequested)
}

// objectArg names an object as the plugin takes it: kind/name, with -n for a namespaced one.
func objectArg(key TargetKey) string {
	arg := resourceArg(key.GVK()) + "/" + key.Name
	if key.Namespace != "" {
		arg += " -n " + key.Namespace
	}
	return arg
}

// resourceArg names a kind as kubectl takes it: kind.group, lower case (configmap, bucket.s3.services.k8s.aws).
func resourceArg(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return strings.ToLower(gvk.Kind)
	}
	return strings.ToLower(gvk.Kind) + "." + gvk.Group
}

// requests starts the pipelines that the object's delete request asks for: one per two-phase
// policy whose finalizer it carries and whose deletion guard (if any) does not hold.
func (r *targetReconciler) requests(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, v verdict) error {
	if obj.Annotations[v1alpha1.AnnotationAbandon] != "" {
		return nil // break glass: the veto is lifted, a plain delete releases the object
	}
	requested := ""
	for _, p := range r.registry.ForGVK(key.GVK()) {
		// Finalizers name a policy within its namespace: a namespaced policy of the same name
		// elsewhere is not this object's.
		if !p.TwoPhase() || !p.InScope(key.Namespace) || p.Suspended || !slices.Contains(obj.Finalizers, p.Finalizer) {
			continue
		}
		if p.Deleting && (p.Pipeline == nil || !(p.Key.Namespaced() && r.reads.namespaceTerminating(ctx, p.Key.Namespace))) {
			continue // its finalizer goes, and its veto with it (armed); an invalid one has nothing to run
		}
		// A TeardownPolicy deleted with its namespace keeps its objects armed (desiredFinalizers):
		// the namespace's deletion is their request, or its veto would hold the namespace for ever.
		if requested == "" {
			// A first look, from the cache: createRun reads the request as admission checked it.
			if requested, _ = r.reads.deleteRequest(ctx, obj, false); requested == "" {
				return nil
			}
		}
		if v.holding[p.Finalizer] {
			r.events.Emit(ctx, targetRef(key, obj), nil, key.Namespace, pipeline.Eventf(true, v1alpha1.ReasonDeleteRequestBlocked,
				"Delete request waits: the deletion guard of %s holds; the pipeline starts once it does not", p.Key))
			continue
		}
		if run := runWith(r.runs.runsOf(ctx, obj.UID), p.Finalizer); run != nil {
			if run.Status.Phase == v1alpha1.RunCancelled {
				r.runs.wake(run)
			}
			continue
		}
		if err := r.createRun(ctx, key, obj, p); err != nil {
			return err
		}
	}
	return nil
}

// requestChanged reports whether a live object's delete request was made, made again or withdrawn.
func requestChanged(ev watch.Event) bool {
	if ev.Old == nil {
		return false
	}
	before, had := ev.Old.Annotations[v1alpha1.AnnotationDeleteRequested]
	after, has := ev.Object.Annotations[v1alpha1.AnnotationDeleteRequested]
	return had != has || before != after // a new value is a new request (one not trusted, set again)
}
