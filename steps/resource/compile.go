package resource

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/lookup"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/steps"
)

// compileIdentity checks whom the step acts as: a TeardownPolicy names a ServiceAccount of its own
// namespace; a ClusterTeardownPolicy names one in any namespace, or none (the operator).
func (a *action) compileIdentity(cc steps.CompileContext, r *v1alpha1.ResourceStep, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	np, nsp := p.Child("serviceAccountName"), p.Child("serviceAccountNamespace")
	if r.ServiceAccountName != "" {
		if msgs := validation.IsDNS1123Subdomain(r.ServiceAccountName); len(msgs) > 0 {
			errs = append(errs, field.Invalid(np, r.ServiceAccountName, "not a ServiceAccount name: "+strings.Join(msgs, "; ")))
		}
	}
	if r.ServiceAccountNamespace != "" {
		if msgs := validation.IsDNS1123Label(r.ServiceAccountNamespace); len(msgs) > 0 {
			errs = append(errs, field.Invalid(nsp, r.ServiceAccountNamespace, "not a namespace name: "+strings.Join(msgs, "; ")))
		}
	}
	switch {
	case cc.Namespaced && r.ServiceAccountName == "":
		errs = append(errs, field.Required(np, fmt.Sprintf(
			"a TeardownPolicy's resource steps act as a ServiceAccount of its namespace %q, whose RBAC decides what they may do: name one", cc.Namespace)))
	case cc.Namespaced && r.ServiceAccountNamespace != "" && r.ServiceAccountNamespace != cc.Namespace:
		errs = append(errs, field.Forbidden(nsp, fmt.Sprintf("a TeardownPolicy acts only as a ServiceAccount of its own namespace %q", cc.Namespace)))
	case cc.Namespaced:
		a.id = Identity{Namespace: cc.Namespace, Name: r.ServiceAccountName}
	case r.ServiceAccountName != "" && r.ServiceAccountNamespace == "":
		errs = append(errs, field.Required(nsp, "a ClusterTeardownPolicy names the namespace of its ServiceAccount"))
	case r.ServiceAccountName == "" && r.ServiceAccountNamespace != "":
		errs = append(errs, field.Required(np, "serviceAccountNamespace is set, but no ServiceAccount is named"))
	default:
		a.id = Identity{Namespace: r.ServiceAccountNamespace, Name: r.ServiceAccountName}
	}
	if a.id.Namespace == SystemNamespace {
		path := nsp
		if cc.Namespaced {
			path = np
		}
		errs = append(errs, field.Forbidden(path, systemRefusal))
	}
	return errs
}

// SystemNamespace is the namespace of the cluster's own controllers; no step acts as one of its
// ServiceAccounts (some of them may escalate, bind or impersonate).
const SystemNamespace = "kube-system"

const systemRefusal = "a resource step never acts as a ServiceAccount of kube-system, whose ServiceAccounts are the cluster's own controllers: make a ServiceAccount in another namespace with a Role granting what the step needs"

// compileManifest compiles the object of a Create or Apply: apiVersion and kind written out,
// metadata.name required, every string a template.
func (a *action) compileManifest(cc steps.CompileContext, r *v1alpha1.ResourceStep, p *field.Path) field.ErrorList {
	mp := p.Child("manifest")
	var errs field.ErrorList
	if r.Target != nil {
		errs = append(errs, field.Forbidden(p.Child("target"), "is for Patch and Delete; a "+string(r.Action)+" acts on the object in manifest"))
	}
	if r.Manifest == nil || len(r.Manifest.Raw) == 0 {
		return append(errs, field.Required(mp, "the object to "+strings.ToLower(string(r.Action))+": apiVersion, kind, metadata.name, and its fields"))
	}
	var m map[string]any
	if err := json.Unmarshal(r.Manifest.Raw, &m); err != nil {
		return append(errs, field.Invalid(mp, field.OmitValueType{}, "must be an object: "+err.Error()))
	}
	apiVersion, _ := m["apiVersion"].(string)
	kind, _ := m["kind"].(string)
	errs = append(errs, a.compileKind(cc, apiVersion, kind, mp.Child("apiVersion"), mp.Child("kind"))...)
	meta, ok := m["metadata"].(map[string]any)
	if !ok {
		return append(errs, field.Required(mp.Child("metadata", "name"), "the object's name: Create adopts the object it made by it"))
	}
	if name, _ := meta["name"].(string); name == "" {
		msg := "the object's name, which may use ${...}: a Create that is repeated adopts the object it made by its name"
		if _, ok := meta["generateName"]; ok {
			msg += "; generateName would make another object on every repeat"
		}
		errs = append(errs, field.Required(mp.Child("metadata", "name"), msg))
	}
	if ns, ok := meta["namespace"].(string); ok {
		errs = append(errs, checkNamespace(cc, ns, mp.Child("metadata", "namespace"))...)
	} else if !cc.Namespaced && cc.TargetScope == steps.ScopeCluster && a.kindNamespaced(cc) {
		errs = append(errs, field.Required(mp.Child("metadata", "namespace"), fmt.Sprintf(
			"%s is cluster-scoped, so there is no target namespace to put the %s in: name one", cc.Target.Kind, kind)))
	}
	if labels, ok := meta["labels"].(map[string]any); ok {
		for k := range labels {
			if prefix, _, ok := strings.Cut(k, "/"); ok && (prefix == naming.Domain || strings.HasSuffix(prefix, "."+naming.Domain)) {
				errs = append(errs, field.Forbidden(mp.Child("metadata", "labels").Key(k), fmt.Sprintf("the %s/ prefix is the operator's", naming.Domain)))
			}
		}
	}
	tree, terrs := compileTree(cc, m, mp)
	a.manifest = tree
	return append(errs, terrs...)
}

// compileTree compiles a manifest or patch: every string a template, a string that is one ${...}
// typed, and at most MaxTemplated of them.
func compileTree(cc steps.CompileContext, v any, p *field.Path) (*expr.Tree, field.ErrorList) {
	tree, errs := cc.Env.CompileTreeWith(v, p, expr.TreeOptions{TypedWhole: true})
	if n := tree.Templated(); n > MaxTemplated {
		errs = append(errs, field.Invalid(p, field.OmitValueType{}, fmt.Sprintf("%d strings hold ${...}; at most %d may", n, MaxTemplated)))
	}
	return tree, errs
}

// compileKind parses an apiVersion and kind, written out (not interpolated: the kind decides
// what is checked and typed), and checks the kind's scope when discovery knows it.
func (a *action) compileKind(cc steps.CompileContext, apiVersion, kind string, vp, kp *field.Path) field.ErrorList {
	var errs field.ErrorList
	gv, err := schema.ParseGroupVersion(apiVersion)
	switch {
	case apiVersion == "":
		errs = append(errs, field.Required(vp, "for example \"v1\" or \"apps/v1\""))
	case strings.Contains(apiVersion, "${"):
		errs = append(errs, field.Invalid(vp, apiVersion, "is written out, not interpolated"))
	case err != nil:
		errs = append(errs, field.Invalid(vp, apiVersion, err.Error()))
	}
	switch {
	case kind == "":
		errs = append(errs, field.Required(kp, "for example \"ConfigMap\""))
	case strings.Contains(kind, "${"):
		errs = append(errs, field.Invalid(kp, kind, "is written out, not interpolated"))
	}
	a.gvk = gv.WithKind(kind)
	if gv.Group == v1alpha1.Group {
		errs = append(errs, field.Forbidden(kp, "a step may not act on teardown.dev objects"))
	}
	if len(errs) == 0 && cc.Namespaced && cc.KindScope != nil {
		if namespaced, err := cc.KindScope(a.gvk); err == nil && !namespaced {
			errs = append(errs, field.Forbidden(kp, fmt.Sprintf("%s is cluster-scoped; a TeardownPolicy acts only on objects in its own namespace %q (use a ClusterTeardownPolicy)", kind, cc.Namespace)))
		}
	}
	return errs
}

// kindNamespaced reports whether discovery knows the step's kind as namespaced (true when it
// cannot tell).
func (a *action) kindNamespaced(cc steps.CompileContext) bool {
	if cc.KindScope == nil {
		return true
	}
	namespaced, err := cc.KindScope(a.gvk)
	return err != nil || namespaced
}

// checkNamespace refuses, in a TeardownPolicy, a namespace written out that is not its own (one
// with ${...} is checked when rendered).
func checkNamespace(cc steps.CompileContext, ns string, p *field.Path) field.ErrorList {
	if _, err := cc.Env.CompileTemplate(ns); err != nil {
		return field.ErrorList{field.Invalid(p, ns, err.Error())}
	}
	if cc.Namespaced && ns != "" && !strings.Contains(ns, "${") && ns != cc.Namespace {
		return field.ErrorList{field.Forbidden(p, fmt.Sprintf("a TeardownPolicy acts only in its own namespace %q", cc.Namespace))}
	}
	return nil
}

// compileTarget compiles the object (or the selector) of a Patch or Delete, and the patch.
func (a *action) compileTarget(cc steps.CompileContext, r *v1alpha1.ResourceStep, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.Manifest != nil {
		errs = append(errs, field.Forbidden(p.Child("manifest"), "is for Create and Apply; a "+string(r.Action)+" acts on target"))
	}
	tp := p.Child("target")
	t := r.Target
	if t == nil {
		return append(errs, field.Required(tp, "the object to "+strings.ToLower(string(r.Action))+": apiVersion, kind, name (or, to delete, a selector)"))
	}
	errs = append(errs, a.compileKind(cc, t.APIVersion, t.Kind, tp.Child("apiVersion"), tp.Child("kind"))...)
	var err error
	switch {
	case (t.Name == "") == (t.Selector == nil):
		errs = append(errs, field.Invalid(tp, "", "set exactly one of name or selector"))
	case t.Selector != nil && r.Action != v1alpha1.ResourceDelete:
		errs = append(errs, field.Forbidden(tp.Child("selector"), "is for Delete only; a Patch names its object"))
	case t.Selector != nil && len(t.Selector.MatchLabels) == 0 && len(t.Selector.MatchExpressions) == 0:
		errs = append(errs, field.Required(tp.Child("selector"), "an empty selector picks every object of the kind: name the labels of the objects to delete"))
	case t.Selector != nil:
		sel, serrs := lookup.CompileLabelSelector(cc.Env, t.Selector, tp.Child("selector"))
		errs, a.selector = append(errs, serrs...), &sel
	default:
		if a.name, err = cc.Env.CompileTemplate(t.Name); err != nil {
			errs = append(errs, field.Invalid(tp.Child("name"), t.Name, err.Error()))
		}
	}
	if t.Namespace != "" {
		errs = append(errs, checkNamespace(cc, t.Namespace, tp.Child("namespace"))...)
		a.namespace, _ = cc.Env.CompileTemplate(t.Namespace)
	} else if !cc.Namespaced && cc.TargetScope == steps.ScopeCluster && a.kindNamespaced(cc) {
		errs = append(errs, field.Required(tp.Child("namespace"), fmt.Sprintf(
			"%s is cluster-scoped, so there is no target namespace to look for the %s in: name one", cc.Target.Kind, t.Kind)))
	}
	if t.Subresource != "" && r.Action != v1alpha1.ResourcePatch {
		errs = append(errs, field.Forbidden(tp.Child("subresource"), "is for Patch only"))
	}
	a.subresource = t.Subresource
	if r.Action == v1alpha1.ResourcePatch {
		errs = append(errs, a.compilePatch(cc, r, p)...)
	}
	return errs
}

// compilePatch compiles a Patch's patch: an object for Merge, a list of operations for JSON.
func (a *action) compilePatch(cc steps.CompileContext, r *v1alpha1.ResourceStep, p *field.Path) field.ErrorList {
	pp := p.Child("patch")
	if r.Patch == nil || len(r.Patch.Raw) == 0 {
		return field.ErrorList{field.Required(pp, "the patch to send")}
	}
	var v any
	if err := json.Unmarshal(r.Patch.Raw, &v); err != nil {
		return field.ErrorList{field.Invalid(pp, field.OmitValueType{}, err.Error())}
	}
	var errs field.ErrorList
	switch r.PatchType {
	case "", v1alpha1.PatchMerge:
		a.patchType = types.MergePatchType
		if _, ok := v.(map[string]any); !ok {
			errs = append(errs, field.Invalid(pp, field.OmitValueType{}, "a merge patch is an object, for example {spec: {replicas: 0}}"))
		}
	case v1alpha1.PatchJSON:
		a.patchType = types.JSONPatchType
		errs = append(errs, checkJSONPatch(v, pp)...)
	default:
		errs = append(errs, field.NotSupported(p.Child("patchType"), r.PatchType, []string{"Merge", "JSON"}))
	}
	tree, terrs := compileTree(cc, v, pp)
	a.patch = tree
	return append(errs, terrs...)
}

var jsonPatchOps = []string{"add", "remove", "replace", "move", "copy", "test"}

// checkJSONPatch checks a JSON patch's shape: a list of operations with op and path.
func checkJSONPatch(v any, pp *field.Path) field.ErrorList {
	ops, ok := v.([]any)
	if !ok {
		return field.ErrorList{field.Invalid(pp, field.OmitValueType{}, "a JSON patch is a list of operations, for example [{op: replace, path: /spec/replicas, value: 0}]")}
	}
	var errs field.ErrorList
	for i, o := range ops {
		op, _ := o.(map[string]any)
		name, _ := op["op"].(string)
		if !slices.Contains(jsonPatchOps, name) {
			errs = append(errs, field.NotSupported(pp.Index(i).Child("op"), op["op"], jsonPatchOps))
		}
		if path, _ := op["path"].(string); path == "" {
			errs = append(errs, field.Required(pp.Index(i).Child("path"), "a JSON pointer, for example /spec/replicas"))
		}
	}
	return errs
}
