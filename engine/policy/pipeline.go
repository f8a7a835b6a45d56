package policy

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// compilePipeline compiles a pipeline; namespace is a TeardownPolicy's, empty for a cluster policy.
func (c *Compiler) compilePipeline(spec *v1alpha1.Pipeline, namespace string, target schema.GroupVersionKind, path *field.Path) (*Pipeline, field.ErrorList) {
	var errs field.ErrorList
	cc := steps.CompileContext{Namespaced: namespace != "", Namespace: namespace, Target: target, KindScope: c.scope, KindType: c.types}
	cc.TargetScope = c.scopeOf(target)
	out := &Pipeline{FailurePolicy: spec.FailurePolicy, Spec: spec}
	if out.FailurePolicy == "" {
		out.FailurePolicy = v1alpha1.FailurePolicyRetain
	}
	if len(spec.Steps) == 0 {
		errs = append(errs, field.Required(path.Child("steps"), "at least one step"))
	}
	// The finally steps read every step and the finally steps before them; the onStuck steps, which
	// may run before any finally step, every step and the onStuck steps before them.
	all := spec.AllSteps()
	infos := c.stepInfos(all)
	usage := &expr.Usage{}
	defer func() {
		out.ReadsObject, out.ReadsObjectBeyondMetadata = usage.Reads(expr.VarObject), usage.ReadsBeyondMetadata(expr.VarObject)
	}()
	seen := map[string]bool{}
	nSteps, nFinally := len(spec.Steps), len(spec.Finally)
	for i := range all {
		s := &all[i]
		sec, at, scope := sectionSteps, i, stepScope(infos, i)
		switch {
		case i >= nSteps+nFinally:
			sec, at = sectionOnStuck, i-nSteps-nFinally
			scope = stepScope(append(slices.Clip(infos[:nSteps]), infos[nSteps+nFinally:]...), nSteps+at)
		case i >= nSteps:
			sec, at = sectionFinally, i-nSteps
		}
		sp := path.Child(string(sec)).Index(at)
		if seen[s.Name] {
			errs = append(errs, field.Duplicate(sp.Child("name"), s.Name))
		}
		seen[s.Name] = true
		// A step's expressions read only the steps before it: a later step has no result yet.
		cc.Env = c.env.WithSteps(scope).Tracking(usage)
		step, serrs := c.compileStep(cc, s, sp, sec)
		errs = append(errs, serrs...)
		if step == nil {
			continue
		}
		switch sec {
		case sectionFinally:
			out.Finally = append(out.Finally, step)
		case sectionOnStuck:
			out.OnStuck = append(out.OnStuck, step)
		default:
			out.Steps = append(out.Steps, step)
		}
	}
	return out, errs
}

// DefaultFinallyTimeout bounds a finally or onStuck step that sets no timeout: such steps never
// hold an object for longer than their own timeout.
const DefaultFinallyTimeout = 5 * time.Minute

// section is the list of a pipeline a step is in, by its field name.
type section string

const (
	sectionSteps   section = "steps"
	sectionFinally section = "finally"
	sectionOnStuck section = "onStuck"
)

// compileStep compiles one step of section sec; nil when it names no kind.
func (c *Compiler) compileStep(cc steps.CompileContext, s *v1alpha1.Step, sp *field.Path, sec section) (*Step, field.ErrorList) {
	finally := sec != sectionSteps
	var errs field.ErrorList
	step := &Step{Spec: *s.DeepCopy()}
	if s.When != "" {
		prog, err := cc.Env.CompileCondition(s.When)
		if err != nil {
			errs = append(errs, field.Invalid(sp.Child("when"), s.When, err.Error()))
		}
		step.When = prog
	}
	if finally && s.Approval != nil {
		return nil, append(errs, field.Forbidden(sp.Child("approval"), fmt.Sprintf("%s steps cannot be approval steps: they tell people, they do not wait for them", sec)))
	}
	kind, err := c.kinds.Find(s)
	if err != nil {
		return nil, append(errs, field.Invalid(sp, s.Name, err.Error()))
	}
	step.Kind = kind.Name()
	step.NeedsRun = needsRun(kind, s)
	if cp, ok := kind.(steps.Checkpointer); ok {
		step.Checkpoint = cp.Checkpoints()
	}
	if finally && (step.Spec.Timeout == nil || step.Spec.Timeout.Duration <= 0) {
		step.Spec.Timeout = &metav1.Duration{Duration: DefaultFinallyTimeout}
	}
	action, kerrs := kind.Compile(cc, s, sp)
	step.Action = action
	return step, append(errs, kerrs...)
}

// scopeOf asks discovery whether gvk is namespaced.
func (c *Compiler) scopeOf(gvk schema.GroupVersionKind) steps.Scope {
	if c.scope == nil || gvk.Kind == "" {
		return steps.ScopeUnknown
	}
	namespaced, err := c.scope(gvk)
	switch {
	case err != nil:
		return steps.ScopeUnknown
	case namespaced:
		return steps.ScopeNamespaced
	}
	return steps.ScopeCluster
}

// stepInfos describes each step for the expressions of the steps after it.
func (c *Compiler) stepInfos(specs []v1alpha1.Step) []expr.StepInfo {
	infos := make([]expr.StepInfo, len(specs))
	for i := range specs {
		infos[i].Name = specs[i].Name
		kind, err := c.kinds.Find(&specs[i])
		if err != nil {
			continue
		}
		infos[i].Kind = kind.Name()
		if d, ok := kind.(steps.OutputDeclarer); ok {
			infos[i].Outputs = d.Outputs(&specs[i])
		}
	}
	return infos
}

// stepScope is what the expressions of step i may read of the other steps.
func stepScope(infos []expr.StepInfo, i int) expr.StepScope {
	after := make([]string, 0, len(infos)-i)
	for _, info := range infos[i:] {
		after = append(after, info.Name)
	}
	return expr.StepScope{Before: infos[:i], After: after}
}
