// Package policy compiles TeardownPolicy and ClusterTeardownPolicy objects into the form the engine
// runs (selectors parsed, every CEL expression compiled, every step bound to its kind) and keeps
// the compiled policies in a registry indexed by target kind.
package policy

import (
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/admission"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Kinds of policy.
const (
	KindNamespaced = "TeardownPolicy"
	KindCluster    = "ClusterTeardownPolicy"
)

// Key identifies a policy.
type Key struct {
	Kind      string
	Namespace string
	Name      string
}

func (k Key) String() string {
	if k.Namespace == "" {
		return k.Kind + "/" + k.Name
	}
	return k.Kind + "/" + k.Namespace + "/" + k.Name
}

// Namespaced reports whether the key names a TeardownPolicy.
func (k Key) Namespaced() bool { return k.Kind == KindNamespaced }

// Finalizer returns the finalizer the policy puts on its targets.
func (k Key) Finalizer() string { return naming.Finalizer(k.Kind, k.Name) }

// KeyOf is the key of the policy a run refers to.
func KeyOf(ref v1alpha1.PolicyReference) Key {
	return Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}
}

// View is the part of either policy kind the engine reads.
type View struct {
	Key               Key
	Object            client.Object
	Spec              *v1alpha1.TeardownPolicySpec
	NamespaceSelector *metav1.LabelSelector
	Status            *v1alpha1.TeardownPolicyStatus
}

// ViewOf returns the view of a TeardownPolicy or ClusterTeardownPolicy; the view shares memory
// with obj.
func ViewOf(obj client.Object) (View, error) {
	switch p := obj.(type) {
	case *v1alpha1.TeardownPolicy:
		return View{Key: Key{KindNamespaced, p.Namespace, p.Name}, Object: p, Spec: &p.Spec, Status: &p.Status}, nil
	case *v1alpha1.ClusterTeardownPolicy:
		return View{Key: Key{KindCluster, "", p.Name}, Object: p, Spec: &p.Spec.TeardownPolicySpec,
			NamespaceSelector: p.Spec.NamespaceSelector, Status: &p.Status}, nil
	}
	return View{}, fmt.Errorf("%T is not a teardown policy", obj)
}

// Step is a compiled step.
type Step struct {
	Spec   v1alpha1.Step
	Kind   string
	When   *expr.Program
	Action steps.Action
	// NeedsRun is set when the step cannot start before its run is recorded (see
	// steps.RunBinder, and readsRunUID).
	NeedsRun bool
	// Checkpoint is set when the step's end is written before the next step starts
	// (steps.Checkpointer).
	Checkpoint bool
}

// Pipeline is a compiled pipeline.
type Pipeline struct {
	Steps []*Step
	// Finally are the steps run once the steps have ended (spec.finally), OnStuck those run once
	// when a run becomes stuck (spec.onStuck).
	Finally, OnStuck []*Step
	FailurePolicy    v1alpha1.FailurePolicy
	Spec             *v1alpha1.Pipeline
	// ReadsObject is false when no expression of the pipeline reads `object`, and
	// ReadsObjectBeyondMetadata when none reads more of it than the metadata fields the engine's
	// cache keeps (expr.MetadataFields): then a run that is not recorded needs no read of its
	// target from the API server.
	ReadsObject, ReadsObjectBeyondMetadata bool
}

// All returns the steps, then the finally steps, then the onStuck steps.
func (p *Pipeline) All() []*Step {
	return slices.Concat(p.Steps, p.Finally, p.OnStuck)
}

// Compiled is a policy ready for the engine.
type Compiled struct {
	Key               Key
	UID               types.UID
	Generation        int64
	Finalizer         string
	GVK               schema.GroupVersionKind
	Selector          labels.Selector
	NamespaceSelector labels.Selector // nil: every namespace
	Match             *expr.Program   // nil: no CEL match
	Pipeline          *Pipeline
	Guard             *Guard // nil: no deletion guard
	Spec              *v1alpha1.TeardownPolicySpec
	Suspended         bool
	Deleting          bool
	// MatchNotAdmissible says why the match cannot run at admission (admission.CheckMatch):
	// then no admission policy arms the targets at creation. Nil when it can, or there is none.
	MatchNotAdmissible error
}

// Compiler compiles policies and pipelines. Pipelines are cached by policy UID and generation,
// so every expression is compiled once per policy generation.
type Compiler struct {
	env   *expr.Env
	kinds steps.Registry
	// scope tells a kind's scope from the cluster's discovery; nil compiles without a cluster.
	scope func(schema.GroupVersionKind) (bool, error)
	// types gives kinds' CEL types (a resource step's `resource`); nil leaves them dyn.
	types func(schema.GroupVersionKind) (expr.Type, error)
	// apiServer is the version of the API server a match is checked against for admission; nil
	// checks against admission.MinVersion.
	apiServer *version.Version

	mu    sync.Mutex
	cache map[pipelineKey]*Pipeline
}

type pipelineKey struct {
	uid        types.UID
	generation int64
}

// maxCached bounds the pipeline cache; past it the cache starts over (entries are cheap to rebuild).
const maxCached = 4096

// NewCompiler returns a compiler for the given step kinds. scope tells whether the cluster serves
// a kind namespaced (an error: it cannot tell); nil compiles without a cluster, leaving to run
// time what only discovery knows.
func NewCompiler(env *expr.Env, kinds steps.Registry, scope func(schema.GroupVersionKind) (bool, error)) *Compiler {
	for _, k := range kinds {
		if d, ok := k.(steps.VariableDeclarer); ok {
			env = env.Reserve(d.Variables()...)
		}
	}
	return &Compiler{env: env, kinds: kinds, scope: scope, cache: map[pipelineKey]*Pipeline{}}
}

// WithKindTypes makes the compiler type the objects steps act on (a resource step's `resource`)
// with types, for example from the schemas the cluster publishes (internal/kindtypes). It
// returns c.
func (c *Compiler) WithKindTypes(types func(schema.GroupVersionKind) (expr.Type, error)) *Compiler {
	c.types = types
	return c
}

// WithAPIServerVersion makes the compiler check whether a policy's match runs at admission
// against the CEL of that version of the API server. It returns c.
func (c *Compiler) WithAPIServerVersion(v *version.Version) *Compiler {
	c.apiServer = v
	return c
}

// KindScope tells from discovery (a RESTMapper) whether a kind is namespaced: the scope a
// Compiler checks kinds with, in the operator and in kubectl teardown plan alike.
func KindScope(mapper meta.RESTMapper) func(schema.GroupVersionKind) (bool, error) {
	return func(gvk schema.GroupVersionKind) (bool, error) {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return false, fmt.Errorf("kind %s is not served: %w", gvk, err)
		}
		return m.Scope.Name() == meta.RESTScopeNameNamespace, nil
	}
}

// Env returns the shared CEL environment.
func (c *Compiler) Env() *expr.Env { return c.env }

// Compile compiles a policy. The errors name the field at fault, such as
// spec.steps[1].wait.until.
func (c *Compiler) Compile(v View) (*Compiled, field.ErrorList) {
	spec := v.Spec
	specPath := field.NewPath("spec")
	var errs field.ErrorList
	gv, err := schema.ParseGroupVersion(spec.TargetRef.APIVersion)
	if err != nil {
		errs = append(errs, field.Invalid(specPath.Child("targetRef", "apiVersion"), spec.TargetRef.APIVersion, err.Error()))
	}
	if gv.Group == v1alpha1.Group {
		errs = append(errs, field.Forbidden(specPath.Child("targetRef", "apiVersion"), "teardown.dev resources cannot be targets"))
	}
	out := &Compiled{
		Key:        v.Key,
		UID:        v.Object.GetUID(),
		Generation: v.Object.GetGeneration(),
		Finalizer:  v.Key.Finalizer(),
		GVK:        gv.WithKind(spec.TargetRef.Kind),
		Spec:       spec,
		Suspended:  spec.Suspend,
		Deleting:   v.Object.GetDeletionTimestamp() != nil,
	}
	out.Selector, err = selector(spec.Selector)
	if err != nil {
		errs = append(errs, field.Invalid(specPath.Child("selector"), spec.Selector, err.Error()))
	}
	if v.NamespaceSelector != nil {
		out.NamespaceSelector, err = selector(v.NamespaceSelector)
		if err != nil {
			errs = append(errs, field.Invalid(specPath.Child("namespaceSelector"), v.NamespaceSelector, err.Error()))
		}
	}
	if spec.Match != "" {
		out.Match, err = c.env.WithSteps(expr.StepScope{Match: true}).CompileCondition(spec.Match)
		if err != nil {
			errs = append(errs, field.Invalid(specPath.Child("match"), spec.Match, err.Error()))
		} else if err := admission.CheckMatch(spec.Match, c.apiServer); err != nil {
			out.MatchNotAdmissible = fmt.Errorf("spec.match: %w", err)
		}
	}
	pipe, perrs := c.compilePipeline(&spec.Pipeline, v.Key.Namespace, out.GVK, specPath)
	errs = append(errs, perrs...)
	guard, gerrs := c.compileGuard(spec.DeletionGuard, v.Key.Namespace, specPath.Child("deletionGuard"))
	errs = append(errs, gerrs...)
	out.Guard = guard
	if len(errs) > 0 {
		return nil, errs
	}
	out.Pipeline = pipe
	c.store(pipelineKey{out.UID, out.Generation}, pipe)
	return out, nil
}

// PipelineForRun returns the compiled pipeline a run copied from its policy.
func (c *Compiler) PipelineForRun(run *v1alpha1.TeardownRun) (*Pipeline, error) {
	key := pipelineKey{run.Spec.PolicyRef.UID, run.Spec.PolicyRef.Generation}
	c.mu.Lock()
	p, ok := c.cache[key]
	c.mu.Unlock()
	// The key comes from the run's own spec: only a pipeline that is the run's is reused, so a
	// hand-made run cannot put its steps in place of a policy's.
	if ok && equality.Semantic.DeepEqual(p.Spec, &run.Spec.Pipeline) {
		return p, nil
	}
	ns := ""
	if run.Spec.PolicyRef.Kind == KindNamespaced {
		ns = run.Spec.PolicyRef.Namespace
	}
	p, errs := c.compilePipeline(&run.Spec.Pipeline, ns, run.Spec.Target.GroupVersionKind(), field.NewPath("spec", "pipeline"))
	if len(errs) > 0 {
		// A run copied its pipeline from a policy that compiled then: checks added since (typed
		// variables, step references, discovery) must not fail its teardown in flight.
		var lerrs field.ErrorList
		if p, lerrs = c.lenient().compilePipeline(&run.Spec.Pipeline, ns, schema.GroupVersionKind{}, field.NewPath("spec", "pipeline")); len(lerrs) > 0 {
			return nil, errs.ToAggregate()
		}
	}
	c.store(key, p)
	return p, nil
}

// lenient is the compiler with untyped expressions and no discovery.
func (c *Compiler) lenient() *Compiler {
	return &Compiler{env: c.env.Untyped(), kinds: c.kinds}
}

func (c *Compiler) store(key pipelineKey, p *Pipeline) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cache) >= maxCached {
		c.cache = map[pipelineKey]*Pipeline{}
	}
	c.cache[key] = p
}
