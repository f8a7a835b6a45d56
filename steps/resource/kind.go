package resource

import (
	"maps"
	"regexp"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/lookup"
	"github.com/teardown-dev/teardown-operator/steps"
)

// RBAC: the operator acts as the ServiceAccounts that policies name, and has no other right of
// theirs; what a step may do is what its ServiceAccount may do. Its ClusterRole does not grant
// impersonate: a cluster administrator grants it per namespace, by binding the ClusterRole
// teardown-operator-resource-steps there (config/rbac/resource_steps_role.yaml), so that no
// policy can act as a ServiceAccount of a namespace nobody opted in (kube-system's among them).
// It reads ServiceAccounts, to act only as one that exists.
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get

// Defaults and limits.
const (
	// VarResource is the CEL variable the conditions and outputs read the object from.
	VarResource = "resource"
	// DefaultInterval is how often conditions, or a deletion, are checked without a change to the
	// object waking the step.
	DefaultInterval = 10 * time.Second
	// MaxTemplated bounds the strings with ${...} in one manifest or patch: each is evaluated on
	// every action.
	MaxTemplated = 64
	// MaxDelete bounds the objects one Delete by selector acts on; more is refused, not truncated.
	MaxDelete = 500
	// maxOutputs bounds a step's outputs, as the CRD does.
	maxOutputs = 16
)

// Output keys every resource step has (but Delete, which has none).
const (
	OutputName      = "name"
	OutputNamespace = "namespace"
)

// LabelDeletion names the deletion (naming.DeletionID) on the objects Create makes, and
// v1alpha1.LabelStep the step: a repeated create adopts an object that carries both.
const LabelDeletion = "teardown.dev/deletion"

// Kind is the resource step kind.
type Kind struct {
	api API
}

// New returns the resource kind, acting through api.
func New(api API) *Kind { return &Kind{api: api} }

// Name implements steps.Kind.
func (*Kind) Name() string { return "resource" }

// Configured implements steps.Kind.
func (*Kind) Configured(s *v1alpha1.Step) bool { return s.Resource != nil }

// Variables implements steps.VariableDeclarer.
func (*Kind) Variables() []string { return []string{VarResource} }

// Outputs implements steps.OutputDeclarer.
func (*Kind) Outputs(s *v1alpha1.Step) []string {
	if s.Resource.Action == v1alpha1.ResourceDelete {
		return nil
	}
	keys := []string{OutputName, OutputNamespace}
	for k := range s.Resource.Outputs {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// action is a compiled resource step.
type action struct {
	api  API
	step string
	verb v1alpha1.ResourceAction
	id   Identity
	gvk  schema.GroupVersionKind

	manifest *expr.Tree // Create, Apply
	// name and namespace of the target (Patch, Delete); namespace nil means the default.
	name, namespace *expr.Template
	selector        *lookup.LabelSelector // Delete by selector
	patch           *expr.Tree
	patchType       types.PatchType
	subresource     string
	propagation     metav1.DeletionPropagation
	waitGone        bool

	success, failure *expr.Program
	outputs          map[string]*expr.Program
	interval         time.Duration
}

var outputName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]{0,62}$`)

// Compile implements steps.Kind.
func (k *Kind) Compile(cc steps.CompileContext, s *v1alpha1.Step, path *field.Path) (steps.Action, field.ErrorList) {
	r := s.Resource
	p := path.Child("resource")
	a := &action{api: k.api, step: s.Name, verb: r.Action, interval: DefaultInterval,
		propagation: metav1.DeletePropagationBackground, waitGone: true}
	errs := a.compileIdentity(cc, r, p)
	switch r.Action {
	case v1alpha1.ResourceCreate, v1alpha1.ResourceApply:
		errs = append(errs, a.compileManifest(cc, r, p)...)
	case v1alpha1.ResourcePatch, v1alpha1.ResourceDelete:
		errs = append(errs, a.compileTarget(cc, r, p)...)
	default:
		errs = append(errs, field.NotSupported(p.Child("action"), r.Action, []string{"Create", "Apply", "Patch", "Delete"}))
	}
	errs = append(errs, a.compileOptions(r, p)...)
	errs = append(errs, a.compileConditions(cc, r, p)...)
	if len(errs) > 0 {
		return nil, errs
	}
	return a, nil
}

// compileOptions checks the fields that belong to one action only.
func (a *action) compileOptions(r *v1alpha1.ResourceStep, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	only := func(set bool, name string, verb v1alpha1.ResourceAction) {
		if set && r.Action != verb {
			errs = append(errs, field.Forbidden(p.Child(name), "is for action "+string(verb)+" only"))
		}
	}
	only(r.PatchType != "", "patchType", v1alpha1.ResourcePatch)
	only(r.PropagationPolicy != nil, "propagationPolicy", v1alpha1.ResourceDelete)
	only(r.WaitForDeletion != nil, "waitForDeletion", v1alpha1.ResourceDelete)
	if r.PropagationPolicy != nil {
		a.propagation = *r.PropagationPolicy
	}
	if r.WaitForDeletion != nil {
		a.waitGone = *r.WaitForDeletion
	}
	if r.Interval != nil {
		if r.Interval.Duration < time.Second {
			errs = append(errs, field.Invalid(p.Child("interval"), r.Interval.Duration.String(), "must be at least 1s"))
		}
		a.interval = r.Interval.Duration
	}
	return errs
}

// compileConditions compiles successCondition, failureCondition and outputs over the typed
// `resource`. A Delete has none: its object is gone when it succeeds.
func (a *action) compileConditions(cc steps.CompileContext, r *v1alpha1.ResourceStep, p *field.Path) field.ErrorList {
	if r.Action == v1alpha1.ResourceDelete {
		var errs field.ErrorList
		for name, set := range map[string]bool{"successCondition": r.SuccessCondition != "", "failureCondition": r.FailureCondition != "", "outputs": len(r.Outputs) > 0} {
			if set {
				errs = append(errs, field.Forbidden(p.Child(name), "a Delete succeeds when its objects are gone, so it has no conditions or outputs; check what remains in a later wait step"))
			}
		}
		return errs
	}
	env, err := cc.Env.Declare(expr.Var{Name: VarResource, Type: resourceType(cc, a.gvk)})
	if err != nil {
		return field.ErrorList{field.InternalError(p, err)}
	}
	var errs field.ErrorList
	compile := func(src, name string) *expr.Program {
		if src == "" {
			return nil
		}
		prog, err := env.CompileCondition(src)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child(name), src, err.Error()))
		}
		return prog
	}
	a.success = compile(r.SuccessCondition, "successCondition")
	a.failure = compile(r.FailureCondition, "failureCondition")
	if len(r.Outputs) > maxOutputs {
		errs = append(errs, field.TooMany(p.Child("outputs"), len(r.Outputs), maxOutputs))
	}
	a.outputs = map[string]*expr.Program{}
	for _, name := range slices.Sorted(maps.Keys(r.Outputs)) {
		src, op := string(r.Outputs[name]), p.Child("outputs").Key(name)
		switch {
		case !outputName.MatchString(name):
			errs = append(errs, field.Invalid(op, name, "an output name must be a CEL identifier (letters, digits and _, not starting with a digit), at most 63 characters"))
		case name == OutputName || name == OutputNamespace:
			errs = append(errs, field.Invalid(op, name, "is set by the step itself (the object's name and namespace)"))
		default:
			if a.outputs[name], err = env.CompileValue(src); err != nil {
				errs = append(errs, field.Invalid(op, src, err.Error()))
			}
		}
	}
	return errs
}

// resourceType is the type of `resource`: the kind's published schema when the cluster (or, offline,
// client-go) knows it, else dyn, checked only when evaluated.
func resourceType(cc steps.CompileContext, gvk schema.GroupVersionKind) expr.Type {
	if cc.KindType == nil || gvk.Kind == "" {
		return expr.Dyn
	}
	t, err := cc.KindType(gvk)
	if err != nil {
		return expr.Dyn
	}
	return t
}
