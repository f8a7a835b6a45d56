package expr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
	"google.golang.org/protobuf/types/known/structpb"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// Names of the variables every expression may read.
const (
	// VarObject is the target object, as it was when its deletion began.
	VarObject = "object"
	// VarSteps maps step names to {phase, outputs} of the steps that ran before.
	VarSteps = "steps"
	// VarRun holds the run's name, uid and the current step's attempt.
	VarRun = "run"
)

// builtins are the names every environment reserves: its own variables, and "now", kept for a
// later clock variable. Step kinds reserve theirs with Reserve.
var builtins = []string{VarObject, VarSteps, VarRun, "now"}

// Builtins returns the names every environment reserves (see Reserve for step kinds' own).
func Builtins() []string { return slices.Clone(builtins) }

// Reserve returns an environment in which names (variables step kinds bind, such as an http
// step's response) cannot be taken by a policy's own names (a wait step's lookups).
func (e *Env) Reserve(names ...string) *Env {
	out := *e
	out.reserved = make(map[string]bool, len(e.reserved)+len(names))
	for n := range e.reserved {
		out.reserved[n] = true
	}
	for _, n := range names {
		out.reserved[n] = true
	}
	return &out
}

// Reserved reports whether name is a built-in variable name or one a step kind reserved.
func (e *Env) Reserved(name string) bool { return e.reserved[name] || slices.Contains(builtins, name) }

// CostLimit bounds the work of one evaluation, in CEL cost units (about one per elementary
// operation); the Kubernetes API server uses the same order of magnitude for CRD validation rules.
const CostLimit = 1_000_000

// MaxEvalTime bounds the time of one evaluation. The cost limit alone does not bound it: cel-go's
// cost tracker takes time quadratic in the length of one comprehension (it searches a stack that
// grows with every iteration), so a single loop under the cost limit, lists.range(140000).all(i,
// i >= 0), ran for half a minute. An expression within the cost limit otherwise takes at most a few
// hundred milliseconds.
const MaxEvalTime = time.Second

// Vars binds variable names to values for one evaluation. Values are plain Go data as decoded
// from JSON (map[string]any, []any, string, float64/int64, bool, nil).
type Vars map[string]any

// With returns a copy of v that also binds name to value.
func (v Vars) With(name string, value any) Vars {
	out := make(Vars, len(v)+1)
	for k, x := range v {
		out[k] = x
	}
	out[name] = value
	return out
}

// Env is a CEL environment. It is safe for concurrent use.
type Env struct {
	cel *cel.Env
	// objects are the declared types the environment knows, and base the type provider of the
	// environment before any was declared: each Declare builds one provider of all the types
	// over base (declared-type providers do not stack).
	objects []*apiservercel.DeclType
	base    types.Provider
	// scope, when set, limits the steps expressions may read (see WithSteps).
	scope *StepScope
	// untyped declares object variables dynamic (see Untyped).
	untyped bool
	// reserved are the names step kinds bind (see Reserve).
	reserved map[string]bool
	// usage, when set, records the variables compiled expressions read (see Tracking).
	usage *Usage
}

// RunType is the type of `run`, and StepType of one entry of `steps`: maps, so that index forms
// (run['name'], steps['export-db']['outputs']) keep working; their field names are checked on
// the expression instead (see checkSteps).
var (
	RunType  = MapOf(Dyn)
	StepType = MapOf(Dyn)
)

// NewEnv builds the base environment: `object` (dynamic: any kind of object), `run` and `steps`.
func NewEnv() (*Env, error) {
	env, err := cel.NewEnv(
		cel.Variable(VarObject, cel.DynType),
		ext.Strings(), ext.Encoders(), ext.Lists(), ext.Sets(), ext.Math(),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		return nil, fmt.Errorf("building CEL environment: %w", err)
	}
	return (&Env{cel: env, base: env.CELTypeProvider()}).Declare(Var{VarRun, RunType}, Var{VarSteps, MapOf(StepType)})
}

// Extend returns an environment that also binds the named variables: lists (for lookups) or
// dynamic values. Names must not be reserved.
func (e *Env) Extend(lists []string, dyns []string) (*Env, error) {
	var vars []Var
	for _, n := range lists {
		if e.Reserved(n) {
			return nil, fmt.Errorf("variable name %q is reserved", n)
		}
		vars = append(vars, Var{n, ListOf(Dyn)})
	}
	for _, n := range dyns {
		vars = append(vars, Var{n, Dyn})
	}
	return e.Declare(vars...)
}

// Program is one compiled expression.
type Program struct {
	src  string
	prog cel.Program
}

// String returns the expression's source.
func (p *Program) String() string { return p.src }

// CompileCondition compiles an expression that must yield a bool. Expressions over dynamic
// values (such as object fields) are checked for bool when they are evaluated.
func (e *Env) CompileCondition(src string) (*Program, error) {
	return e.compile(src, true)
}

// CompileValue compiles an expression of any type.
func (e *Env) CompileValue(src string) (*Program, error) {
	return e.compile(src, false)
}

func (e *Env) compile(src string, wantBool bool) (*Program, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("expression is empty")
	}
	ast, iss := e.cel.Compile(src)
	if iss.Err() != nil {
		return nil, errors.New(strings.TrimSpace(iss.Err().Error()))
	}
	if err := e.checkSteps(ast); err != nil {
		return nil, err
	}
	e.usage.record(ast)
	if wantBool {
		if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
			return nil, fmt.Errorf("must evaluate to bool, not %s", t)
		}
	}
	prog, err := e.cel.Program(ast,
		cel.CostLimit(CostLimit),
		cel.InterruptCheckFrequency(100),
		cel.EvalOptions(cel.OptOptimize),
	)
	if err != nil {
		return nil, fmt.Errorf("planning: %w", err)
	}
	return &Program{src: src, prog: prog}, nil
}

// Eval evaluates the program and returns the CEL value, within CostLimit and MaxEvalTime.
func (p *Program) Eval(ctx context.Context, vars Vars) (ref.Val, error) {
	evalCtx, cancel := context.WithTimeout(ctx, MaxEvalTime)
	defer cancel()
	out, _, err := p.prog.ContextEval(evalCtx, map[string]any(vars))
	if err != nil {
		return nil, fmt.Errorf("evaluating %q: %w", p.src, explain(ctx, evalCtx, err))
	}
	return out, nil
}

// explain adds the limit an evaluation went past to cel-go's error, which names none.
func explain(parent, evalCtx context.Context, err error) error {
	var cancelled interpreter.EvalCancelledError
	switch {
	case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded:
		return fmt.Errorf("%w (one evaluation may cost at most %d CEL cost units)", err, CostLimit)
	case errors.Is(err, context.DeadlineExceeded) && parent.Err() == nil && evalCtx.Err() != nil:
		return fmt.Errorf("operation cancelled: took longer than %s, the most one evaluation may take", MaxEvalTime)
	}
	return err
}

// EvalBool evaluates a condition.
func (p *Program) EvalBool(ctx context.Context, vars Vars) (bool, error) {
	out, err := p.Eval(ctx, vars)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("evaluating %q: got %s, want bool", p.src, out.Type().TypeName())
	}
	return bool(b), nil
}

// EvalJSON evaluates the program and returns its value encoded as JSON.
func (p *Program) EvalJSON(ctx context.Context, vars Vars) ([]byte, error) {
	out, err := p.Eval(ctx, vars)
	if err != nil {
		return nil, err
	}
	b, err := ToJSON(out)
	if err != nil {
		return nil, fmt.Errorf("evaluating %q: %w", p.src, err)
	}
	return b, nil
}

var jsonValueType = reflect.TypeOf(&structpb.Value{})

// ToJSON encodes a CEL value as compact JSON with sorted keys. (protojson is avoided on purpose:
// its whitespace varies from build to build, and rendered values must be stable text.)
func ToJSON(v ref.Val) ([]byte, error) {
	native, err := v.ConvertToNative(jsonValueType)
	if err != nil {
		return nil, fmt.Errorf("value of type %s cannot be represented as JSON: %w", v.Type().TypeName(), err)
	}
	return json.Marshal(native.(*structpb.Value).AsInterface())
}

// toText renders an interpolated value as text: strings as they are, numbers and bools in their
// usual form, lists and maps as JSON.
func toText(v ref.Val) (string, error) {
	switch t := v.(type) {
	case types.String:
		return string(t), nil
	case types.Bool:
		return strconv.FormatBool(bool(t)), nil
	case types.Int:
		return strconv.FormatInt(int64(t), 10), nil
	case types.Uint:
		return strconv.FormatUint(uint64(t), 10), nil
	case types.Double:
		return strconv.FormatFloat(float64(t), 'f', -1, 64), nil
	case types.Null:
		return "", errors.New("value is null")
	}
	b, err := ToJSON(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
