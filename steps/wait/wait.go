// Package wait implements the wait step: a fixed duration measured from the step's start, or a CEL
// condition over the target and over lookups of other objects, checked on an interval and again
// whenever a looked-up object changes.
package wait

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/lookup"
	"github.com/teardown-dev/teardown-operator/steps"
)

// DefaultInterval is how often `until` is checked when the step sets no interval.
const DefaultInterval = 10 * time.Second

// MaxLookupItems bounds how many objects one lookup may bind (lookup.MaxItems).
const MaxLookupItems = lookup.MaxItems

// ErrTooMany is returned by a Lister when more than the limit of objects match.
var ErrTooMany = lookup.ErrTooMany

// Lister reads the objects a lookup names.
type Lister = lookup.Lister

// NewAPILister returns a Lister reading through reader, with kinds' scopes from mapper.
var NewAPILister = lookup.NewAPILister

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

type action struct {
	lister   Lister
	duration time.Duration
	until    *expr.Program
	interval time.Duration
	lookups  []lookup.Lookup
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
		lc := lookup.Context{Env: cc.Env, Namespaced: cc.Namespaced, Namespace: cc.Namespace, KindScope: cc.KindScope}
		lookups, env, lerrs := lookup.Compile(lc, w.Lookups, p.Child("lookups"))
		errs = append(errs, lerrs...)
		a.lookups = lookups
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
	var found []string
	for _, l := range a.lookups {
		items, wt, err := a.resolve(ctx, in, l)
		if err != nil {
			return steps.Fail(!errors.Is(err, lookup.ErrRefused), "lookup %s: %v", l.Name, err)
		}
		vars[l.Name] = items
		watch = append(watch, wt)
		found = append(found, describeFound(l.Name, items, wt.Namespace))
	}
	ok, err := a.until.EvalBool(ctx, vars)
	var r steps.Result
	sep := ": "
	switch {
	case err != nil:
		// Objects change during a teardown (a field appears, a child goes): an evaluation error
		// is reported and checked again, bounded by the step timeout.
		r, sep = steps.Waiting(a.interval, "until: %v", err), "; "
	case ok:
		return steps.Done("condition met: %s", a.until)
	default:
		r = steps.Waiting(a.interval, "waiting for %s", a.until)
	}
	// What the lookups found is what the step waits on: the status says it, and so does the
	// failure of a step that times out (the engine quotes the last message).
	if len(found) > 0 {
		r.Message += sep + strings.Join(found, "; ")
	}
	r.Watch = watch
	return r
}

// foundNamesShown bounds the names a waiting step's message lists per lookup: enough to tell
// which objects hold the step up, short enough for one line of status (the count says how many
// there are in all).
const foundNamesShown = 3

// describeFound says what a lookup found, as "pods: 2 (db-0, db-1)". Names are sorted, so the
// message changes only when what was found does (a run's status is written when it changes). In
// a lookup of one namespace (namespace set) names are bare; otherwise namespace/name.
func describeFound(lookupName string, items []any, namespace string) string {
	if len(items) == 0 {
		return lookupName + ": 0"
	}
	names := make([]string, 0, len(items))
	for _, it := range items {
		n := nameOf(it)
		if namespace != "" {
			n = strings.TrimPrefix(n, namespace+"/")
		}
		names = append(names, n)
	}
	slices.Sort(names)
	shown := strings.Join(names[:min(len(names), foundNamesShown)], ", ")
	if more := len(names) - foundNamesShown; more > 0 {
		shown += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("%s: %d (%s)", lookupName, len(items), shown)
}

// resolve lists a lookup's objects for the run's target.
func (a *action) resolve(ctx context.Context, in *steps.Input, l lookup.Lookup) ([]any, steps.WatchTarget, error) {
	items, t, err := l.Resolve(ctx, a.lister, in.Vars, lookup.Where{TargetNamespace: in.Run.Spec.Target.Namespace, PolicyNamespace: in.PolicyNamespace})
	return items, steps.WatchTarget{GVK: t.GVK, Namespace: t.Namespace}, err
}
