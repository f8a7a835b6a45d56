package resource

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/teardown-dev/teardown-operator/steps"
)

// retrySoon is the wait after a transient API error, which is not an attempt.
const retrySoon = 2 * time.Second

// render renders the manifest into the object to create or apply, in the namespace it goes to.
func (a *action) render(ctx context.Context, in *steps.Input) (*unstructured.Unstructured, Ref, *steps.Result) {
	v, err := a.manifest.Render(ctx, in.Vars)
	if err != nil {
		return nil, Ref{GVK: a.gvk}, ptr(steps.Fail(false, "manifest: %v", err))
	}
	m, _ := dropNulls(v).(map[string]any)
	obj := &unstructured.Unstructured{Object: m}
	ref := Ref{GVK: a.gvk, Name: obj.GetName()}
	if ref.Name == "" {
		return nil, ref, ptr(steps.Fail(false, "manifest: metadata.name rendered empty"))
	}
	ns, res := a.placeIn(in, obj.GetNamespace())
	if res != nil {
		return nil, ref, res
	}
	obj.SetNamespace(ns)
	ref.Namespace = ns
	return obj, ref, nil
}

// dropNulls removes map entries whose value is null, at every depth: a field of a manifest
// that renders null (null, or an optional without a value) is left out, as if not written.
func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
				continue
			}
			x[k] = dropNulls(e)
		}
	case []any:
		for i, e := range x {
			x[i] = dropNulls(e)
		}
	}
	return v
}

// targetRef renders the name and namespace of a Patch's or Delete's object.
func (a *action) targetRef(ctx context.Context, in *steps.Input) (Ref, *steps.Result) {
	ref := Ref{GVK: a.gvk}
	ns := ""
	if a.namespace != nil {
		var err error
		if ns, err = a.namespace.Render(ctx, in.Vars); err != nil {
			return ref, ptr(steps.Fail(false, "target.namespace: %v", err))
		}
	}
	ns, res := a.placeIn(in, ns)
	if res != nil {
		return ref, res
	}
	ref.Namespace = ns
	if a.name != nil {
		name, err := a.name.Render(ctx, in.Vars)
		if err != nil {
			return ref, ptr(steps.Fail(false, "target.name: %v", err))
		}
		if name == "" {
			return ref, ptr(steps.Fail(false, "target.name rendered empty"))
		}
		ref.Name = name
	}
	return ref, nil
}

// placeIn decides the namespace of the step's object: the one written (rendered), else the
// target's. A TeardownPolicy's step acts only in the policy's namespace, and on no cluster-scoped
// object; a cluster-scoped kind has no namespace.
func (a *action) placeIn(in *steps.Input, written string) (string, *steps.Result) {
	namespaced, err := a.api.Namespaced(a.gvk)
	if err != nil {
		// A CRD not installed yet, or discovery failing: another attempt may find it.
		return "", ptr(steps.Fail(true, "%v", err))
	}
	if !namespaced {
		if in.Namespaced() {
			return "", ptr(steps.Fail(false, "%s is cluster-scoped; a TeardownPolicy acts only on objects in its own namespace %q", a.gvk.Kind, in.PolicyNamespace))
		}
		return "", nil
	}
	ns := written
	if ns == "" {
		ns = in.Run.Spec.Target.Namespace
	}
	switch {
	case ns == "":
		return "", ptr(steps.Fail(false, "%s is namespaced and the target is not: the step must name a namespace", a.gvk.Kind))
	case in.Namespaced() && ns != in.PolicyNamespace:
		return "", ptr(steps.Fail(false, "namespace %q: a TeardownPolicy acts only in its own namespace %q", ns, in.PolicyNamespace))
	}
	return ns, nil
}

// apiFailure is the step's result for an error of an API call (verb) on ref.
func (a *action) apiFailure(err error, verb string, ref Ref) steps.Result {
	where := ""
	if ref.Namespace != "" {
		where = " in namespace " + ref.Namespace
	}
	switch {
	case errors.As(err, new(*NoServiceAccountError)):
		return steps.Fail(true, "%v", err) // a ServiceAccount created later helps a retry
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return steps.Fail(false, "namespace %s is being deleted, and no object can be created in a terminating namespace: %v", ref.Namespace, err)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot impersonate"):
		return steps.Fail(true, "the operator may not act as %s: namespace %s is not opted in to resource steps; a cluster administrator opts it in by binding ClusterRole teardown-operator-resource-steps there to the operator's ServiceAccount (chart value resourceSteps.namespaces; docs/resource-steps.md, \"Opting a namespace in\"): %v",
			a.id, a.id.Namespace, err)
	case apierrors.IsForbidden(err):
		// RBAC (or an admission policy) refused: a Role granted later helps a retry.
		what := resourceName(err, ref)
		if verb == "patch" && a.subresource != "" {
			what += "/" + a.subresource
		}
		return steps.Fail(true, "%s may not %s %s%s: %v", a.id, verb, what, where, err)
	case apierrors.IsUnauthorized(err):
		return steps.Fail(true, "the API server did not authenticate the operator to %s %s%s as %s: %v", verb, resourceName(err, ref), where, a.id, err)
	case meta.IsNoMatchError(err):
		return steps.Fail(true, "%s (%s) is not served by the cluster: is its CRD installed? %v", ref.GVK.Kind, ref.GVK.GroupVersion(), err)
	case apierrors.IsNotFound(err) && verb == "create":
		return steps.Fail(false, "cannot create %s: namespace %s does not exist: %v", ref, ref.Namespace, err)
	case apierrors.IsNotFound(err):
		return steps.Fail(true, "%s does not exist: %v", ref, err)
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return steps.Fail(false, "the API server refused to %s %s: %v", verb, ref, err)
	case steps.Transient(err):
		return steps.Waiting(retrySoon, "%s %s: %v; trying again", verb, ref, err)
	}
	return steps.Fail(true, "%s %s: %v", verb, ref, err)
}

// resourceName names what a verb applies to as RBAC does (backups.postgresql.cnpg.io), from the
// API server's answer, else by the kind.
func resourceName(err error, ref Ref) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if d := status.Status().Details; d != nil && d.Kind != "" {
			if d.Group == "" {
				return d.Kind
			}
			return d.Kind + "." + d.Group
		}
	}
	return ref.GVK.Kind + " objects"
}

// summary says where the object stands, from status.phase or its conditions, for the step's
// message: " (phase running)", or "".
func summary(obj *unstructured.Unstructured) string {
	if phase, ok, _ := unstructured.NestedString(obj.Object, "status", "phase"); ok && phase != "" {
		return fmt.Sprintf(" (phase %s)", phase)
	}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var parts []string
	for _, c := range conds {
		m, _ := c.(map[string]any)
		t, _ := m["type"].(string)
		s, _ := m["status"].(string)
		if t != "" && len(parts) < 3 {
			parts = append(parts, t+"="+s)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
