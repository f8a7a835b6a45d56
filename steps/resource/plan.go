package resource

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/lookup"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Rendered is what a resource step's plan shows: the object to create or apply, or the target
// and the patch.
type Rendered struct {
	As       string         `json:"as"`
	Object   map[string]any `json:"object,omitempty"`
	Target   string         `json:"target,omitempty"`
	Selector string         `json:"selector,omitempty"`
	Patch    any            `json:"patch,omitempty"`
}

// Plan implements steps.Planner: the action rendered, not made, and the API calls it needs of
// its ServiceAccount. It reads nothing from the cluster but discovery.
func (a *action) Plan(ctx context.Context, in *steps.Input) steps.Plan {
	r := Rendered{As: a.id.String()}
	var ref Ref
	var res *steps.Result
	switch a.verb {
	case v1alpha1.ResourceCreate, v1alpha1.ResourceApply:
		var obj *unstructured.Unstructured
		if obj, ref, res = a.render(ctx, in); res == nil {
			if a.verb == v1alpha1.ResourceCreate {
				a.label(obj, in)
			}
			r.Object = obj.Object
		}
	default:
		if ref, res = a.targetRef(ctx, in); res == nil {
			r.Target = ref.String()
			res = a.planTarget(ctx, in, &r)
		}
	}
	summary := a.summary(ref)
	if res != nil {
		return steps.Plan{Summary: summary, Rendered: r, Err: res.Message}
	}
	return steps.Plan{Summary: summary, Rendered: r, Access: a.access(ref)}
}

// planTarget renders a Delete's selector or a Patch's patch.
func (a *action) planTarget(ctx context.Context, in *steps.Input, r *Rendered) *steps.Result {
	if a.selector != nil {
		sel, err := a.selector.Render(ctx, in.Vars)
		if err != nil {
			return ptr(steps.Fail(false, "target.%s", strings.TrimPrefix(err.Error(), lookup.ErrRefused.Error()+": ")))
		}
		r.Selector, r.Target = sel.String(), ""
	}
	if a.patch != nil {
		p, err := a.patch.Render(ctx, in.Vars)
		if err != nil {
			return ptr(steps.Fail(false, "patch: %v", err))
		}
		r.Patch = p
	}
	return nil
}

// summary says in a line what the step would do.
func (a *action) summary(ref Ref) string {
	what := ref.String()
	if ref.Name == "" {
		what = a.gvk.Kind
		if a.selector != nil {
			what += " objects matching the selector"
		}
		if ref.Namespace != "" {
			what += " in " + ref.Namespace
		}
	}
	s := fmt.Sprintf("%s %s as %s", strings.ToLower(string(a.verb)), what, a.id)
	if a.subresource != "" {
		s += " (" + a.subresource + ")"
	}
	switch {
	case a.verb == v1alpha1.ResourceDelete && a.waitGone:
		s += ", and wait until gone"
	case a.success != nil:
		s += ", then wait until " + a.success.String()
	}
	return s
}

// access lists the API calls the step makes, by RBAC verb.
func (a *action) access(ref Ref) []steps.Access {
	var verbs []string
	sub := ""
	switch a.verb {
	case v1alpha1.ResourceCreate:
		verbs = []string{"create", "get"} // get: to adopt after a crash, and to check conditions
	case v1alpha1.ResourceApply:
		verbs = []string{"patch", "create"} // a server-side apply of an object not there creates it
	case v1alpha1.ResourcePatch:
		verbs, sub = []string{"patch"}, a.subresource
	case v1alpha1.ResourceDelete:
		verbs = []string{"get", "delete"}
		if a.selector != nil {
			verbs = []string{"list", "delete"}
		}
	}
	var out []steps.Access
	for _, v := range verbs {
		out = append(out, steps.Access{Verb: v, GVK: a.gvk, Subresource: sub, Namespace: ref.Namespace, Name: ref.Name})
	}
	if a.verb == v1alpha1.ResourcePatch && (a.success != nil || a.failure != nil || len(a.outputs) > 0) {
		out = append(out, steps.Access{Verb: "get", GVK: a.gvk, Namespace: ref.Namespace, Name: ref.Name})
	}
	if !a.id.IsOperator() {
		for i := range out {
			out[i].User = a.id.Username()
			out[i].Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + a.id.Namespace, "system:authenticated"}
		}
	}
	return out
}
