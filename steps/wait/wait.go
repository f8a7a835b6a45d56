// Package wait implements the wait step: a fixed duration measured from the step's start, or a CEL
// condition over the target and over lookups of other objects, checked on an interval and again
// whenever a looked-up object changes.
package wait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// DefaultInterval is how often `until` is checked when the step sets no interval.
const DefaultInterval = 10 * time.Second

// MaxLookupItems bounds how many objects one lookup may bind; a condition over more is refused
// rather than evaluated over a silently truncated list.
const MaxLookupItems = 1000

// ErrTooMany is returned by a Lister when more than the limit of objects match.
var ErrTooMany = errors.New("too many objects")

// Lister reads the objects a lookup names.
type Lister interface {
	// Namespaced reports whether the kind is namespaced; an error means it is not served.
	Namespaced(gvk schema.GroupVersionKind) (bool, error)
	// List returns the full objects of the kind in namespace (empty: all) matching selector,
	// at most limit of them, or ErrTooMany.
	List(ctx context.Context, gvk schema.GroupVersionKind, namespace string, selector labels.Selector, limit int) ([]any, error)
}

// Kind is the wait step kind.
type Kind struct {
	lister Lister
}

// New returns the wait kind, reading lookups through lister.
func New(lister Lister) *Kind { return &Kind{lister: lister} }

// Name implements steps.Kind.
func (*Kind) Name() string { return "wait" }

// Configured implements steps.Kind.
func (*Kind) Configured(s *v1alpha1.Step) bool { return s.Wait != nil }

type lookup struct {
	name      string
	gvk       schema.GroupVersionKind
	namespace *expr.Template
	// selector holds the label selector with each matchLabels value and matchExpressions value
	// compiled as a template.
	matchLabels map[string]*expr.Template
	exprs       []selectorExpr
}

type selectorExpr struct {
	key    string
	op     metav1.LabelSelectorOperator
	values []*expr.Template
}

type action struct {
	lister   Lister
	duration time.Duration
	until    *expr.Program
	interval time.Duration
	lookups  []lookup
}

// Compile implements steps.Kind.
func (k *Kind) Compile(cc steps.CompileContext, s *v1alpha1.Step, path *field.Path) (steps.Action, field.ErrorList) {
	w := s.Wait
	p := path.Child("wait")
	var errs field.ErrorList
	a := &action{lister: k.lister, interval: DefaultInterval}
	if w.Interval != nil {
		if w.Interval.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child("interval"), w.Interval.Duration.String(), "must be positive"))
		}
		a.interval = w.Interval.Duration
	}
	switch {
	case w.Duration != nil && w.Until != "":
		errs = append(errs, field.Invalid(p, "", "set exactly one of duration or until"))
	case w.Duration != nil:
		if w.Duration.Duration < 0 {
			errs = append(errs, field.Invalid(p.Child("duration"), w.Duration.Duration.String(), "must not be negative"))
		}
		a.duration = w.Duration.Duration
		if len(w.Lookups) > 0 {
			errs = append(errs, field.Invalid(p.Child("lookups"), len(w.Lookups), "lookups are read only by until"))
		}
	case w.Until != "":
		env, lerrs := k.compileLookups(cc, w.Lookups, p.Child("lookups"), a)
		errs = append(errs, lerrs...)
		if env != nil {
			prog, err := env.CompileCondition(w.Until)
			if err != nil {
				errs = append(errs, field.Invalid(p.Child("until"), w.Until, err.Error()))
			}
			a.until = prog
		}
	default:
		errs = append(errs, field.Required(p, "set duration or until"))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return a, nil
}

func (k *Kind) compileLookups(cc steps.CompileContext, ls []v1alpha1.Lookup, p *field.Path, a *action) (*expr.Env, field.ErrorList) {
	var errs field.ErrorList
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
		gv, err := schema.ParseGroupVersion(l.APIVersion)
		if err != nil {
			errs = append(errs, field.Invalid(lp.Child("apiVersion"), l.APIVersion, err.Error()))
		}
		lk := lookup{name: l.Name, gvk: gv.WithKind(l.Kind), matchLabels: map[string]*expr.Template{}}
		if err := checkScope(cc, lk.gvk); err != nil {
			errs = append(errs, field.Forbidden(lp.Child("kind"), err.Error()))
		}
		if lk.namespace, err = cc.Env.CompileTemplate(l.Namespace); err != nil {
			errs = append(errs, field.Invalid(lp.Child("namespace"), l.Namespace, err.Error()))
		} else if cc.Namespaced && lk.namespace.Literal() && l.Namespace != "" && l.Namespace != cc.Namespace {
			errs = append(errs, field.Forbidden(lp.Child("namespace"), fmt.Sprintf("a TeardownPolicy may look only in its own namespace %q", cc.Namespace)))
		}
		if l.Selector != nil {
			sp := lp.Child("selector")
			for key, v := range l.Selector.MatchLabels {
				t, err := cc.Env.CompileTemplate(v)
				if err != nil {
					errs = append(errs, field.Invalid(sp.Child("matchLabels").Key(key), v, err.Error()))
				}
				lk.matchLabels[key] = t
			}
			for j, e := range l.Selector.MatchExpressions {
				se := selectorExpr{key: e.Key, op: e.Operator}
				for vi, v := range e.Values {
					t, err := cc.Env.CompileTemplate(v)
					if err != nil {
						errs = append(errs, field.Invalid(sp.Child("matchExpressions").Index(j).Child("values").Index(vi), v, err.Error()))
					}
					se.values = append(se.values, t)
				}
				lk.exprs = append(lk.exprs, se)
			}
			errs = append(errs, checkSelector(l.Selector, sp)...)
		}
		a.lookups = append(a.lookups, lk)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	env, err := cc.Env.Extend(names, nil)
	if err != nil {
		return nil, field.ErrorList{field.Invalid(p, names, err.Error())}
	}
	return env, nil
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
func checkScope(cc steps.CompileContext, gvk schema.GroupVersionKind) error {
	if !cc.Namespaced || cc.KindScope == nil || gvk.Kind == "" {
		return nil
	}
	if namespaced, err := cc.KindScope(gvk); err == nil && !namespaced {
		return fmt.Errorf("%s is cluster-scoped; a TeardownPolicy may look up only objects in its own namespace %q (use a ClusterTeardownPolicy)", gvk.Kind, cc.Namespace)
	}
	return nil
}

// stateStartedAt keeps the step's start to the nanosecond: the status's startTime is stored to
// the second, and a wait measured from it could end up to a second early.
const stateStartedAt = "startedAt"

// startedAt is when the step started: from its state once recorded, else from its startTime,
// which is exact in the pass that starts the step (nothing has been stored yet).
func startedAt(ss *v1alpha1.StepStatus) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, ss.State[stateStartedAt]); err == nil {
		return t
	}
	return ss.StartTime.Time
}

// Execute implements steps.Action.
func (a *action) Execute(ctx context.Context, in *steps.Input) steps.Result {
	if a.until == nil {
		start := startedAt(in.Status)
		end := start.Add(a.duration)
		if !in.Now.Before(end) {
			return steps.Done("waited %s", a.duration)
		}
		res := steps.Waiting(end.Sub(in.Now), "waiting until %s", end.UTC().Format(time.RFC3339))
		res.State = map[string]string{stateStartedAt: start.UTC().Format(time.RFC3339Nano)}
		return res
	}
	vars := make(expr.Vars, len(in.Vars)+len(a.lookups))
	for k, v := range in.Vars {
		vars[k] = v
	}
	var watch []steps.WatchTarget
	for _, l := range a.lookups {
		items, wt, err := a.resolve(ctx, in, l)
		if err != nil {
			return steps.Fail(!errors.Is(err, errRefused), "lookup %s: %v", l.name, err)
		}
		vars[l.name] = items
		watch = append(watch, wt)
	}
	ok, err := a.until.EvalBool(ctx, vars)
	switch {
	case err != nil:
		// Objects change during a teardown (a field appears, a child goes): an evaluation error
		// is reported and checked again, bounded by the step timeout.
		r := steps.Waiting(a.interval, "until: %v", err)
		r.Watch = watch
		return r
	case ok:
		return steps.Done("condition met: %s", a.until)
	default:
		r := steps.Waiting(a.interval, "waiting for %s", a.until)
		r.Watch = watch
		return r
	}
}

var errRefused = errors.New("refused")

func (a *action) resolve(ctx context.Context, in *steps.Input, l lookup) ([]any, steps.WatchTarget, error) {
	wt := steps.WatchTarget{GVK: l.gvk}
	namespaced, err := a.lister.Namespaced(l.gvk)
	if err != nil {
		return nil, wt, err
	}
	if namespaced {
		ns, err := l.namespace.Render(ctx, in.Vars)
		if err != nil {
			return nil, wt, fmt.Errorf("namespace: %w", err)
		}
		if ns == "" {
			ns = in.Run.Spec.Target.Namespace
		}
		if in.Namespaced() && ns != in.PolicyNamespace {
			return nil, wt, fmt.Errorf("%w: a TeardownPolicy may look only in its own namespace %q, not %q", errRefused, in.PolicyNamespace, ns)
		}
		wt.Namespace = ns
	} else if in.Namespaced() {
		return nil, wt, fmt.Errorf("%w: a TeardownPolicy may not look up cluster-scoped %s", errRefused, l.gvk.Kind)
	}
	sel, err := l.selector(ctx, in.Vars)
	if err != nil {
		return nil, wt, err
	}
	items, err := a.lister.List(ctx, l.gvk, wt.Namespace, sel, MaxLookupItems)
	if errors.Is(err, ErrTooMany) {
		return nil, wt, fmt.Errorf("%w: more than %d %s match %q", errRefused, MaxLookupItems, l.gvk.Kind, sel)
	}
	return items, wt, err
}

// selector renders the interpolated label selector.
func (l lookup) selector(ctx context.Context, vars expr.Vars) (labels.Selector, error) {
	ls := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for k, t := range l.matchLabels {
		v, err := t.Render(ctx, vars)
		if err != nil {
			return nil, fmt.Errorf("selector.matchLabels[%s]: %w", k, err)
		}
		ls.MatchLabels[k] = v
	}
	for _, e := range l.exprs {
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
		return nil, fmt.Errorf("%w: selector: %v", errRefused, err)
	}
	return sel, nil
}
