package expr

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
)

// StepInfo describes a step for the expressions of the steps after it.
type StepInfo struct {
	Name string
	// Kind is the step's kind (wait, http, job), for messages.
	Kind string
	// Outputs are the keys of the step's outputs.
	Outputs []string
}

// StepScope says which steps an expression may read through `steps`: only the steps before the
// one it belongs to have results. `steps` is a map (step names may hold '-', which a field
// selection cannot), so the checker cannot see a wrong name; the scope catches every reference
// made with a literal name instead.
type StepScope struct {
	// Before are the steps that run before the expression's step, in order.
	Before []StepInfo
	// After are the names of the expression's own step and the steps after it.
	After []string
	// Match marks the scope of a policy's match, which is evaluated before any step runs.
	Match bool
}

// WithSteps returns an environment whose expressions may reference only the steps scope allows.
func (e *Env) WithSteps(scope StepScope) *Env {
	if e.untyped {
		return e
	}
	out := *e
	out.scope = &scope
	return &out
}

// checkSteps reports the first reference in a checked expression to a step, a step field, an
// output or a run field that the scope does not allow. An expression whose comprehension binds a
// variable named steps or run is not checked for that name: there it is the user's variable.
func (e *Env) checkSteps(checked *cel.Ast) error {
	root := checked.NativeRep().Expr()
	shadowed := boundNames(root)
	var first error
	ast.PreOrderVisit(root, ast.NewExprVisitor(func(x ast.Expr) {
		if first == nil {
			first = e.checkRef(x, shadowed)
		}
	}))
	return first
}

// runFields are the fields of `run`, stepFields those of an entry of `steps`.
var (
	runFields  = []string{"name", "namespace", "uid", "attempt", "step", "phase", "message"}
	stepFields = []string{"phase", "message", "outputs"}
)

// checkRef checks one node: a selection from run, from steps, from a step or from its outputs.
func (e *Env) checkRef(x ast.Expr, shadowed map[string]bool) error {
	operand, name, ok := member(x)
	if !ok {
		if e.scope != nil && e.scope.Match && !shadowed[VarRun] && x.Kind() == ast.IdentKind && x.AsIdent() == VarRun {
			return fmt.Errorf("run: match is evaluated before any run exists, so it cannot read run")
		}
		return nil
	}
	switch {
	case e.untyped:
		return nil
	case isIdent(operand, VarRun) && !shadowed[VarRun]:
		if !slices.Contains(runFields, name) {
			return fmt.Errorf("run.%s: run has no field %q (it has: %s)", name, name, strings.Join(runFields, ", "))
		}
	case e.scope == nil || shadowed[VarSteps]:
	case isIdent(operand, VarSteps):
		_, err := e.scope.step(name)
		return err
	}
	if e.scope == nil || shadowed[VarSteps] {
		return nil
	}
	if step, ok := stepRef(operand); ok {
		if !slices.Contains(stepFields, name) {
			return fmt.Errorf("steps.%s.%s: a step has no field %q (it has: %s)", step, name, name, strings.Join(stepFields, ", "))
		}
		return nil
	}
	if step, key, ok := outputRef(x); ok {
		return e.scope.checkOutput(step, key)
	}
	return nil
}

func isIdent(x ast.Expr, name string) bool { return x.Kind() == ast.IdentKind && x.AsIdent() == name }

// boundNames returns the variable names comprehensions in the expression bind.
func boundNames(root ast.Expr) map[string]bool {
	names := map[string]bool{}
	ast.PreOrderVisit(root, ast.NewExprVisitor(func(x ast.Expr) {
		if x.Kind() == ast.ComprehensionKind {
			c := x.AsComprehension()
			for _, n := range []string{c.IterVar(), c.IterVar2(), c.AccuVar()} {
				if n != "" {
					names[n] = true
				}
			}
		}
	}))
	return names
}

func (s *StepScope) step(name string) (*StepInfo, error) {
	for i := range s.Before {
		if s.Before[i].Name == name {
			return &s.Before[i], nil
		}
	}
	switch {
	case s.Match:
		return nil, fmt.Errorf("steps.%s: match is evaluated before any step runs, so it cannot read steps", name)
	case len(s.After) > 0 && s.After[0] == name:
		return nil, fmt.Errorf("steps.%s is this step's own result, which is not known yet; expressions read only earlier steps", name)
	case slices.Contains(s.After, name):
		return nil, fmt.Errorf("steps.%s runs after this step; expressions read only earlier steps (%s)", name, s.earlier())
	}
	return nil, fmt.Errorf("steps.%s: the policy has no step %q (%s)", name, name, s.earlier())
}

func (s *StepScope) earlier() string {
	if len(s.Before) == 0 {
		return "no step runs before it"
	}
	names := make([]string, len(s.Before))
	for i, st := range s.Before {
		names[i] = st.Name
	}
	return "earlier steps: " + strings.Join(names, ", ")
}

func (s *StepScope) checkOutput(name, key string) error {
	st, err := s.step(name)
	if err != nil {
		return err
	}
	if slices.Contains(st.Outputs, key) {
		return nil
	}
	if len(st.Outputs) == 0 {
		return fmt.Errorf("steps.%s.outputs.%s: %s step %s has no outputs", name, key, st.Kind, name)
	}
	return fmt.Errorf("steps.%s.outputs.%s: %s step %s has no output %q (it has: %s)", name, key, st.Kind, name, key, strings.Join(st.Outputs, ", "))
}

// stepRef recognises steps.NAME, steps['NAME'] and their optional forms.
func stepRef(x ast.Expr) (string, bool) {
	operand, name, ok := member(x)
	if !ok || !isIdent(operand, VarSteps) {
		return "", false
	}
	return name, true
}

// outputRef recognises steps.NAME.outputs.KEY (in any of the selection and index forms).
func outputRef(x ast.Expr) (string, string, bool) {
	operand, key, ok := member(x)
	if !ok {
		return "", "", false
	}
	outputs, field, ok := member(operand)
	if !ok || field != "outputs" {
		return "", "", false
	}
	name, ok := stepRef(outputs)
	return name, key, ok
}

// member splits a selection of a literal name (a.b, a['b'], a.?b, a[?'b']) into its operand and
// the name. A presence test (has(a.b)) is a selection too.
func member(x ast.Expr) (ast.Expr, string, bool) {
	switch x.Kind() {
	case ast.SelectKind:
		s := x.AsSelect()
		return s.Operand(), s.FieldName(), true
	case ast.CallKind:
		c := x.AsCall()
		fn := c.FunctionName()
		if (fn != operators.Index && fn != operators.OptIndex && fn != operators.OptSelect) || len(c.Args()) != 2 {
			return nil, "", false
		}
		lit := c.Args()[1]
		if lit.Kind() != ast.LiteralKind {
			return nil, "", false
		}
		s, ok := lit.AsLiteral().(types.String)
		if !ok {
			return nil, "", false
		}
		return c.Args()[0], string(s), true
	}
	return nil, "", false
}
