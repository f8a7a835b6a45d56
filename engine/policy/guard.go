package policy

import (
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
