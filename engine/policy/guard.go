package policy

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/lookup"
)

// Guard is a compiled deletion guard: while Deny holds, the object may not be deleted.
type Guard struct {
	Deny    *expr.Program
	Message *expr.Template
	Lookups []lookup.Lookup
	// Always is set when the guard holds also while the object's namespace is being deleted.
	Always bool
}

// compileGuard compiles spec.deletionGuard. Its expressions read the object and the lookups,
// never steps or run: a guard is evaluated while no teardown has started.
func (c *Compiler) compileGuard(g *v1alpha1.DeletionGuard, namespace string, path *field.Path) (*Guard, field.ErrorList) {
	if g == nil {
		return nil, nil
	}
	cc := lookup.Context{Env: c.env.WithSteps(expr.StepScope{Match: true}), Namespaced: namespace != "",
		Namespace: namespace, KindScope: c.scope}
	out := &Guard{Always: g.NamespaceDeletion == v1alpha1.GuardDenyNamespaceDeletion}
	lookups, env, errs := lookup.Compile(cc, g.Lookups, path.Child("lookups"))
	if env == nil {
		return nil, errs
	}
	out.Lookups = lookups
	var err error
	if out.Deny, err = env.CompileCondition(g.Deny); err != nil {
		errs = append(errs, field.Invalid(path.Child("deny"), g.Deny, err.Error()))
	}
	if g.Message == "" {
		errs = append(errs, field.Required(path.Child("message"), "say why the object may not be deleted"))
	} else if out.Message, err = env.CompileTemplate(g.Message); err != nil {
		errs = append(errs, field.Invalid(path.Child("message"), g.Message, err.Error()))
	}
	return out, errs
}

// Verdict is one guard's answer on one object: whether it denies the deletion and its rendered
// message, and what its lookups read (to be woken when those change).
type Verdict struct {
	Deny    bool
	Message string
	Watch   []lookup.Target
}

// Evaluate evaluates the guard on the full object: its lookups read through lister (in the
// policy's namespace for a TeardownPolicy: policyNamespace), then deny, then the message.
func (g *Guard) Evaluate(ctx context.Context, lister lookup.Lister, full map[string]any, targetNamespace, policyNamespace string) (Verdict, error) {
	vars := ObjectVars(full)
	var v Verdict
	for _, l := range g.Lookups {
		items, t, err := l.Resolve(ctx, lister, vars, lookup.Where{TargetNamespace: targetNamespace, PolicyNamespace: policyNamespace})
		v.Watch = append(v.Watch, t)
		if err != nil {
			return v, fmt.Errorf("lookup %s: %w", l.Name, err)
		}
		vars[l.Name] = items
	}
	deny, err := g.Deny.EvalBool(ctx, vars)
	if err != nil || !deny {
		return v, err
	}
	if v.Message, err = g.Message.Render(ctx, vars); err != nil {
		return v, fmt.Errorf("message: %w", err)
	}
	v.Deny = true
	return v, nil
}
