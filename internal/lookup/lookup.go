// Package lookup compiles and resolves lookups: the objects of a kind, in a namespace, matching a
// label selector whose values may interpolate ${...} over the target, bound as a list to a CEL
// variable. Wait steps' conditions and deletion guards read them.
package lookup

import (
	"context"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/secretdata"
)

// MaxItems bounds how many objects one lookup may bind; an expression over more is refused
// rather than evaluated over a silently truncated list.
const MaxItems = 1000

// ErrTooMany is returned by a Lister when more than the limit of objects match.
var ErrTooMany = errors.New("too many objects")

// ErrRefused marks a lookup refused for what it asks (a namespace a TeardownPolicy may not read,
// too many objects, a selector that is not one), as opposed to a failure to read.
var ErrRefused = errors.New("refused")

// Lister reads the objects a lookup names.
type Lister interface {
	// Namespaced reports whether the kind is namespaced; an error means it is not served.
	Namespaced(gvk schema.GroupVersionKind) (bool, error)
	// List returns the full objects of the kind in namespace (empty: all) matching selector,
	// at most limit of them, or ErrTooMany.
	List(ctx context.Context, gvk schema.GroupVersionKind, namespace string, selector labels.Selector, limit int) ([]any, error)
}

// Lookup is one compiled lookup.
type Lookup struct {
	// Name is the CEL variable its objects are bound to.
	Name string
	GVK  schema.GroupVersionKind
	// namespace and the selector's values are compiled as templates.
	namespace *expr.Template
	selector  LabelSelector
}

// LabelSelector is a label selector whose values take ${...} interpolation.
type LabelSelector struct {
	matchLabels map[string]*expr.Template
	exprs       []selectorExpr
}

type selectorExpr struct {
	key    string
	op     metav1.LabelSelectorOperator
	values []*expr.Template
}

// Context is what compiling a policy's lookups needs to know of the policy.
type Context struct {
	// Env is the CEL environment the lookups' templates are compiled in; Compile extends it.
	Env *expr.Env
	// Namespaced is set for a TeardownPolicy, which may look only in its own Namespace.
	Namespaced bool
	Namespace  string
	// KindScope tells whether the cluster serves a kind namespaced; nil without a cluster.
	KindScope func(gvk schema.GroupVersionKind) (namespaced bool, err error)
}

// Target is a kind, in a namespace (empty: all), whose changes may change a lookup's result.
type Target struct {
	GVK       schema.GroupVersionKind
	Namespace string
}

// Compile compiles lookups for a policy (cc) and returns them with cc's environment extended by
// their variables.
func Compile(cc Context, ls []v1alpha1.Lookup, p *field.Path) ([]Lookup, *expr.Env, field.ErrorList) {
	var errs field.ErrorList
	var out []Lookup
	var names []string
	seen := map[string]bool{}
	for i, l := range ls {
		lp := p.Index(i)
		if cc.Env.Reserved(l.Name) {
			errs = append(errs, field.Invalid(lp.Child("name"), l.Name, "is a built-in variable name"))
		}
		if seen[l.Name] {
			errs = append(errs, field.Duplicate(lp.Child("name"), l.Name))
		}
		seen[l.Name] = true
		names = append(names, l.Name)
		lk, lerrs := compileOne(cc, l, lp)
		errs = append(errs, lerrs...)
		out = append(out, lk)
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	env, err := cc.Env.Extend(names, nil)
	if err != nil {
		return nil, nil, field.ErrorList{field.Invalid(p, names, err.Error())}
	}
	return out, env, nil
}

func compileOne(cc Context, l v1alpha1.Lookup, lp *field.Path) (Lookup, field.ErrorList) {
	var errs field.ErrorList
	gv, err := schema.ParseGroupVersion(l.APIVersion)
	if err != nil {
		errs = append(errs, field.Invalid(lp.Child("apiVersion"), l.APIVersion, err.Error()))
	}
	lk := Lookup{Name: l.Name, GVK: gv.WithKind(l.Kind)}
	if err := checkScope(cc, lk.GVK); err != nil {
		errs = append(errs, field.Forbidden(lp.Child("kind"), err.Error()))
	}
	if lk.namespace, err = cc.Env.CompileTemplate(l.Namespace); err != nil {
		errs = append(errs, field.Invalid(lp.Child("namespace"), l.Namespace, err.Error()))
	} else if cc.Namespaced && lk.namespace.Literal() && l.Namespace != "" && l.Namespace != cc.Namespace {
		errs = append(errs, field.Forbidden(lp.Child("namespace"), fmt.Sprintf("a TeardownPolicy may look only in its own namespace %q", cc.Namespace)))
	}
	var serrs field.ErrorList
	lk.selector, serrs = CompileLabelSelector(cc.Env, l.Selector, lp.Child("selector"))
	return lk, append(errs, serrs...)
}

// CompileLabelSelector compiles a label selector whose values take ${...} over env's variables,
// and checks what is written literally as the API server checks label selectors. A nil selector
// selects everything.
func CompileLabelSelector(env *expr.Env, sel *metav1.LabelSelector, sp *field.Path) (LabelSelector, field.ErrorList) {
	out := LabelSelector{matchLabels: map[string]*expr.Template{}}
	if sel == nil {
		return out, nil
	}
	var errs field.ErrorList
	for key, v := range sel.MatchLabels {
		t, err := env.CompileTemplate(v)
		if err != nil {
			errs = append(errs, field.Invalid(sp.Child("matchLabels").Key(key), v, err.Error()))
		}
		out.matchLabels[key] = t
	}
	for j, e := range sel.MatchExpressions {
		se := selectorExpr{key: e.Key, op: e.Operator}
		for vi, v := range e.Values {
			t, err := env.CompileTemplate(v)
			if err != nil {
				errs = append(errs, field.Invalid(sp.Child("matchExpressions").Index(j).Child("values").Index(vi), v, err.Error()))
			}
			se.values = append(se.values, t)
		}
		out.exprs = append(out.exprs, se)
	}
	return out, append(errs, checkSelector(sel, sp)...)
}

// checkSelector checks a lookup's selector as the API server checks label selectors: keys,
// operators, and the values written literally (an interpolated value is checked once rendered).
func checkSelector(sel *metav1.LabelSelector, path *field.Path) field.ErrorList {
	c := sel.DeepCopy()
	literal := func(v string) string {
		if strings.Contains(v, "${") {
			return "x" // a valid stand-in for what the rendering gives
		}
		return strings.ReplaceAll(v, "$${", "${")
	}
	for k, v := range c.MatchLabels {
		c.MatchLabels[k] = literal(v)
	}
	for i := range c.MatchExpressions {
		for j, v := range c.MatchExpressions[i].Values {
			c.MatchExpressions[i].Values[j] = literal(v)
		}
	}
	return metav1validation.ValidateLabelSelector(c, metav1validation.LabelSelectorValidationOptions{}, path)
}

// checkScope refuses, when discovery can tell, a TeardownPolicy's lookup of a cluster-scoped kind:
// a namespaced policy reads only its own namespace. A kind discovery does not know is left to
// run time (its CRD may be installed later).
func checkScope(cc Context, gvk schema.GroupVersionKind) error {
	if !cc.Namespaced || cc.KindScope == nil || gvk.Kind == "" {
		return nil
	}
	if namespaced, err := cc.KindScope(gvk); err == nil && !namespaced {
		return fmt.Errorf("%s is cluster-scoped; a TeardownPolicy may look up only objects in its own namespace %q (use a ClusterTeardownPolicy)", gvk.Kind, cc.Namespace)
	}
	return nil
}

// Where says where a lookup may look: the target's namespace (the default), and, for a
// TeardownPolicy, the one namespace it may read.
type Where struct {
	TargetNamespace string
	// PolicyNamespace is set for a TeardownPolicy only.
	PolicyNamespace string
}

// Resolve lists the lookup's objects, and says what to watch to see them change.
func (l Lookup) Resolve(ctx context.Context, lister Lister, vars expr.Vars, w Where) ([]any, Target, error) {
	wt := Target{GVK: l.GVK}
	namespaced, err := lister.Namespaced(l.GVK)
	if err != nil {
		return nil, wt, err
	}
	if namespaced {
		ns, err := l.namespace.Render(ctx, vars)
		if err != nil {
			return nil, wt, fmt.Errorf("namespace: %w", err)
		}
		if ns == "" {
			ns = w.TargetNamespace
		}
		if w.PolicyNamespace != "" && ns != w.PolicyNamespace {
			return nil, wt, fmt.Errorf("%w: a TeardownPolicy may look only in its own namespace %q, not %q", ErrRefused, w.PolicyNamespace, ns)
		}
		wt.Namespace = ns
	} else if w.PolicyNamespace != "" {
		return nil, wt, fmt.Errorf("%w: a TeardownPolicy may not look up cluster-scoped %s", ErrRefused, l.GVK.Kind)
	}
	sel, err := l.Selector(ctx, vars)
	if err != nil {
		return nil, wt, err
	}
	items, err := lister.List(ctx, l.GVK, wt.Namespace, sel, MaxItems)
	if errors.Is(err, ErrTooMany) {
		return nil, wt, fmt.Errorf("%w: more than %d %s match %q", ErrRefused, MaxItems, l.GVK.Kind, sel)
	}
	// A Secret's data is never bound: what no expression sees, no message can quote.
	for i, item := range items {
		if obj, ok := item.(map[string]any); ok {
			items[i] = secretdata.Without(obj)
		}
	}
	return items, wt, err
}

// Selector renders the interpolated label selector.
func (l Lookup) Selector(ctx context.Context, vars expr.Vars) (labels.Selector, error) {
	return l.selector.Render(ctx, vars)
}

// Render renders the selector's values.
func (s LabelSelector) Render(ctx context.Context, vars expr.Vars) (labels.Selector, error) {
	ls := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for k, t := range s.matchLabels {
		v, err := t.Render(ctx, vars)
		if err != nil {
			return nil, fmt.Errorf("selector.matchLabels[%s]: %w", k, err)
		}
		ls.MatchLabels[k] = v
	}
	for _, e := range s.exprs {
		r := metav1.LabelSelectorRequirement{Key: e.key, Operator: e.op}
		for _, t := range e.values {
			v, err := t.Render(ctx, vars)
			if err != nil {
				return nil, fmt.Errorf("selector.matchExpressions[%s]: %w", e.key, err)
			}
			r.Values = append(r.Values, v)
		}
		ls.MatchExpressions = append(ls.MatchExpressions, r)
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("%w: selector: %v", ErrRefused, err)
	}
	return sel, nil
}
