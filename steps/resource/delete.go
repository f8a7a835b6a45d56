package resource

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/teardown-dev/teardown-operator/internal/lookup"
	"github.com/teardown-dev/teardown-operator/steps"
)

// deleteNamed deletes the target object and, unless waitForDeletion is false, waits until it is
// gone. Each pass reads it first (and again after the delete): gone (or replaced by another of its name, once this step has
// deleted it) is success, so a delete repeated after a crash, or of an object that never existed,
// succeeds. The delete is sent with the object's UID as a precondition, so a namesake created
// in between is never deleted in its place.
func (a *action) deleteNamed(ctx context.Context, in *steps.Input, st state) steps.Result {
	ref, res := a.targetRef(ctx, in)
	if res != nil {
		return *res
	}
	st.Namespace, st.Name = ref.Namespace, ref.Name
	obj, err := a.api.Get(ctx, a.id, ref)
	switch {
	case apierrors.IsNotFound(err) && st.UID != "":
		return a.finish(steps.Done("%s deleted and gone", ref), st, ref)
	case apierrors.IsNotFound(err):
		return a.finish(steps.Done("%s does not exist: nothing to delete", ref), st, ref)
	case err != nil:
		return a.finish(a.apiFailure(err, "get", ref), st, ref)
	case st.UID != "" && obj.GetUID() != st.UID:
		return a.finish(steps.Done("%s deleted and gone (another object of that name has been created since)", ref), st, ref)
	case obj.GetUID() == in.Run.Spec.Target.UID:
		return steps.Fail(false, "%s is the object being torn down, which the operator holds until the pipeline ends: a step cannot delete it (its deletion is the pipeline's end; with trigger DeleteRequest the operator deletes it)", ref)
	}
	if obj.GetDeletionTimestamp() == nil {
		err := a.api.Delete(ctx, a.id, ref, a.propagation, obj.GetUID())
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone, or replaced, since the read: the next pass sees which.
		case err != nil:
			return a.finish(a.apiFailure(err, "delete", ref), st, ref)
		}
	}
	st.UID = obj.GetUID()
	if !a.waitGone {
		return a.finish(steps.Done("%s deleted (%s); not waiting for it to go", ref, a.propagation), st, ref)
	}
	// An object nothing holds is gone at once: read it again rather than wait for a watch event
	// that may have come before the watch of its kind started.
	if now, err := a.api.Get(ctx, a.id, ref); apierrors.IsNotFound(err) || err == nil && now.GetUID() != st.UID {
		return a.finish(steps.Done("%s deleted and gone", ref), st, ref)
	} else if err == nil {
		obj = now
	}
	return a.finish(steps.Waiting(a.interval, "%s deleted; waiting for it to go%s", ref, finalizers(obj)), st, ref)
}

// deleteSelected deletes every object the selector picks and, unless waitForDeletion is false,
// waits until none is left. Each pass lists them again and deletes those not being deleted yet,
// so one that appears meanwhile (or a repeat after a crash) is handled alike.
func (a *action) deleteSelected(ctx context.Context, in *steps.Input, st state) steps.Result {
	ref, res := a.targetRef(ctx, in)
	if res != nil {
		return *res
	}
	sel, err := a.selector.Render(ctx, in.Vars)
	if err != nil {
		return steps.Fail(false, "target.%s", strings.TrimPrefix(err.Error(), lookup.ErrRefused.Error()+": "))
	}
	what := fmt.Sprintf("%s objects matching %q", a.gvk.Kind, sel)
	if ref.Namespace != "" {
		what += " in namespace " + ref.Namespace
	}
	items, err := a.api.List(ctx, a.id, a.gvk, ref.Namespace, sel, MaxDelete+1)
	if err != nil {
		return a.finish(a.apiFailure(err, "list", ref), st, ref)
	}
	if len(items) > MaxDelete {
		return steps.Fail(false, "more than %d %s: a step deletes at most %d; narrow the selector", MaxDelete, what, MaxDelete)
	}
	if len(items) == 0 {
		return a.finish(steps.Done("no %s are left", what), st, ref)
	}
	items = slices.DeleteFunc(items, func(it unstructured.Unstructured) bool {
		return it.GetUID() == in.Run.Spec.Target.UID // the object being torn down: the pipeline's end deletes it
	})
	if len(items) == 0 {
		return a.finish(steps.Done("no %s are left", what), st, ref)
	}
	for i := range items {
		it := &items[i]
		if it.GetDeletionTimestamp() != nil {
			continue
		}
		one := Ref{GVK: a.gvk, Namespace: it.GetNamespace(), Name: it.GetName()}
		if err := a.api.Delete(ctx, a.id, one, a.propagation, it.GetUID()); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return a.finish(a.apiFailure(err, "delete", one), st, ref)
		}
	}
	if !a.waitGone {
		return a.finish(steps.Done("deleted %d %s; not waiting for them to go", len(items), what), st, ref)
	}
	// What nothing holds is gone at once: list again rather than wait for watch events that may
	// have come before the watch of the kind started.
	if left, err := a.api.List(ctx, a.id, a.gvk, ref.Namespace, sel, MaxDelete+1); err == nil {
		left = slices.DeleteFunc(left, func(it unstructured.Unstructured) bool { return it.GetUID() == in.Run.Spec.Target.UID })
		if len(left) == 0 {
			return a.finish(steps.Done("deleted %d %s; none is left", len(items), what), st, ref)
		}
		items = left
	}
	return a.finish(steps.Waiting(a.interval, "deleted %s; waiting for %d to go: %s", what, len(items), names(items)), st, ref)
}

// namesShown bounds the names a waiting delete's message lists.
const namesShown = 3

// names lists objects' names, sorted, as "a, b, c and 2 more".
func names(items []unstructured.Unstructured) string {
	ns := make([]string, 0, len(items))
	for i := range items {
		ns = append(ns, items[i].GetName())
	}
	slices.Sort(ns)
	s := strings.Join(ns[:min(len(ns), namesShown)], ", ")
	if more := len(ns) - namesShown; more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// finalizers says which finalizers hold an object being deleted: " (finalizers: a, b)", or "".
func finalizers(obj *unstructured.Unstructured) string {
	if f := obj.GetFinalizers(); len(f) > 0 {
		return " (finalizers: " + strings.Join(f, ", ") + ")"
	}
	return ""
}
