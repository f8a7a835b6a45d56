// Package steps defines the one interface every kind of teardown step implements (wait, http,
// job, resource), and the registry the engine finds them in. The engine owns everything common
// to all kinds: guards, attempts, retries with backoff, timeouts, onFailure and status; a kind
// only compiles its own fields and performs one bounded action per call.
package steps

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// Kind is one kind of step. Implementations are stateless and safe for concurrent use.
type Kind interface {
	// Name is the step field that selects this kind, for example "wait".
	Name() string
	// Configured reports whether step uses this kind.
	Configured(step *v1alpha1.Step) bool
	// Compile checks and compiles the kind's fields once per policy generation. Errors name
	// fields under path (the step's path, such as spec.steps[2]).
	Compile(cc CompileContext, step *v1alpha1.Step, path *field.Path) (Action, field.ErrorList)
}

// CompileContext is what a kind may use while compiling.
type CompileContext struct {
	// Env is the shared CEL environment (object, steps, run).
	Env *expr.Env
	// Namespaced is true for a TeardownPolicy, whose steps may act only in its own namespace.
	Namespaced bool
	// Namespace is a TeardownPolicy's namespace.
	Namespace string
	// Target is the kind the policy protects, and TargetScope whether the cluster serves it as
	// a namespaced or a cluster-scoped kind (ScopeUnknown when discovery cannot tell).
	Target      schema.GroupVersionKind
	TargetScope Scope
	// KindScope tells whether the cluster serves a kind namespaced (true) or cluster-scoped; an
	// error means discovery cannot tell (the kind is not served). Nil when compiling without a
	// cluster.
	KindScope func(gvk schema.GroupVersionKind) (namespaced bool, err error)
	// KindType returns the CEL type of a kind's objects, from the schema the cluster publishes
	// (internal/kindtypes); an error means it is not known, and such objects are dyn. Nil when
	// types are not looked up.
	KindType func(gvk schema.GroupVersionKind) (expr.Type, error)
}

// Scope is whether a kind's objects live in namespaces.
type Scope int

const (
	// ScopeUnknown: discovery could not tell (or was not asked).
	ScopeUnknown Scope = iota
	ScopeNamespaced
	ScopeCluster
)

// VariableDeclarer is implemented by kinds that bind CEL variables of their own in some of their
// expressions (an http step's response, a job step's job), so that no name a policy chooses (a
// wait step's lookup) can take them.
type VariableDeclarer interface {
	Variables() []string
}

// RunBinder is implemented by kinds whose steps need their TeardownRun recorded before they start
// (a Job step's Job is owned by the run and labelled with its UID). The engine runs a new run's
// first pass before it records the run, so that a pipeline that ends at once costs one write;
// it stops that pass before a step of such a kind.
type RunBinder interface {
	BindsRun() bool
}

// Checkpointer is implemented by kinds whose step's end must be written to the run before the
// next step starts (an approval: who approved is on record before anything it allowed happens).
// The engine otherwise runs as many steps as are done at once in one pass and writes once.
type Checkpointer interface {
	Checkpoints() bool
}

// OutputDeclarer is implemented by kinds whose steps have outputs, so that the expressions of
// later steps are checked against the keys a step really has.
type OutputDeclarer interface {
	// Outputs returns the keys of the outputs step will have.
	Outputs(step *v1alpha1.Step) []string
}

// Action is a compiled step, ready to execute.
type Action interface {
	// Execute performs at most one bounded action (one request, one create, one check) and
	// reports where the step stands. It must not sleep or loop waiting: to be called again later
	// it returns InProgress with CheckAfter.
	Execute(ctx context.Context, in *Input) Result
}

// Input is what one execution sees. It must be treated as read-only.
type Input struct {
	Run *v1alpha1.TeardownRun
	// Status is the step's status so far, State included.
	Status *v1alpha1.StepStatus
	// Vars binds object, steps and run for expressions.
	Vars expr.Vars
	// PolicyNamespace is the namespace of a TeardownPolicy; empty for a ClusterTeardownPolicy.
	PolicyNamespace string
	Now             time.Time
	// Ending is, for a finally step, the number of the pipeline's ending it runs for
	// (status.endings: a run that ends again runs its finally steps again); 0 for the steps.
	Ending int32
}

// DeletionID names the deletion the run is for (naming.DeletionID): the same for every pass and
// retry, and known before the run is recorded.
func (in *Input) DeletionID() string {
	ref := in.Run.Spec.PolicyRef
	return naming.DeletionID(ref.Kind, ref.Namespace, ref.Name, in.Run.Spec.Target.UID)
}

// Namespaced reports whether the step runs for a namespaced policy.
func (in *Input) Namespaced() bool { return in.PolicyNamespace != "" }

// Outcome is where a step stands after one execution.
type Outcome int

const (
	// InProgress: call again after CheckAfter, or when a watched object changes.
	InProgress Outcome = iota
	// Succeeded: the step is done.
	Succeeded
	// Failed: the attempt failed; Retryable says whether another attempt may help.
	Failed
)

// Result reports one execution.
type Result struct {
	Outcome Outcome
	// Message says in words what happened; it is shown in the run status.
	Message string
	// Retryable marks a failure as transient: the engine retries within the step's retry limit.
	Retryable bool
	// RetryAfter, when set, replaces the backoff before the next attempt (for example Retry-After).
	RetryAfter time.Duration
	// CheckAfter is when an InProgress step wants to be executed again.
	CheckAfter time.Duration
	// Outputs are stored in the step status, for later steps as steps.<name>.outputs.
	Outputs map[string]apiextensionsv1.JSON
	// State, when not nil, replaces the step's State.
	State map[string]string
	// Watch lists objects whose changes should execute an InProgress step again at once.
	Watch []WatchTarget
	// Approval, when not nil, replaces the step's approval record (an approval step's answers).
	Approval *v1alpha1.ApprovalStatus
}

// WatchTarget is a kind of object, in one namespace or (empty) all, that a step depends on.
type WatchTarget struct {
	GVK       schema.GroupVersionKind
	Namespace string
}

// Factory builds a step kind from what the engine gives kinds.
type Factory func(Deps) Kind

// Deps are what step kinds may use of the running operator.
type Deps struct {
	// Client reads from the operator's cache (what it watches: a kind's Owns objects) and writes.
	Client client.Client
	// Reader reads from the API server, bypassing the cache (for objects the operator does not
	// watch, such as Secrets).
	Reader client.Reader
	// Mapper answers from discovery which kinds the cluster serves, and their scope.
	Mapper meta.RESTMapper
	// Wake queues a run for a reconcile now, for a step whose work finished outside a reconcile
	// (an HTTP response that came after the reconcile stopped waiting for it).
	Wake func(run types.NamespacedName)
	// Config is the manager's REST config, for clients the controller-runtime client cannot
	// replace (pod logs).
	Config *rest.Config
	// NamespaceTerminating reports whether a namespace is being deleted, from the cache.
	NamespaceTerminating func(ctx context.Context, namespace string) bool
	// Fence returns an error once this replica may have lost its leader election lease (see
	// internal/fence): a side effect outside the API server (an http request) checks it right
	// before it happens. Nil allows always.
	Fence func() error
}

// Registry holds the kinds the engine knows.
type Registry []Kind

// Build makes a registry of the kinds the factories build from deps.
func Build(factories []Factory, deps Deps) Registry {
	r := make(Registry, 0, len(factories))
	for _, f := range factories {
		r = append(r, f(deps))
	}
	return r
}

// Find returns the kind step uses, or an error when it uses none or several.
func (r Registry) Find(step *v1alpha1.Step) (Kind, error) {
	var found Kind
	for _, k := range r {
		if !k.Configured(step) {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("sets both %s and %s; set exactly one step kind", found.Name(), k.Name())
		}
		found = k
	}
	if found == nil {
		return nil, fmt.Errorf("sets no step kind; set exactly one of %s", r.names())
	}
	return found, nil
}

func (r Registry) names() string {
	s := ""
	for i, k := range r {
		if i > 0 {
			s += ", "
		}
		s += k.Name()
	}
	return s
}

// Done is a Result for a step that succeeded.
func Done(format string, args ...any) Result {
	return Result{Outcome: Succeeded, Message: fmt.Sprintf(format, args...)}
}

// Waiting is a Result for a step to look at again after d.
func Waiting(d time.Duration, format string, args ...any) Result {
	return Result{Outcome: InProgress, CheckAfter: d, Message: fmt.Sprintf(format, args...)}
}

// Fail is a Result for a failed attempt.
func Fail(retryable bool, format string, args ...any) Result {
	return Result{Outcome: Failed, Retryable: retryable, Message: fmt.Sprintf(format, args...)}
}

// Owner is implemented by kinds whose steps create objects for their runs (Jobs, for the job
// kind). The engine watches objects of the returned types that carry v1alpha1.LabelRunUID, and a change to
// one executes the run named by its v1alpha1.LabelRun and v1alpha1.LabelRunNamespace labels at once.
type Owner interface {
	Owns() []client.Object
	// ReleaseRun lets go of everything the kind's steps made for a finished run: what still runs
	// is stopped, the rest may be cleaned up. The engine calls it until it returns nil and keeps
	// the run's own finalizer until then, so nothing is left behind by a crash or a missed
	// Release. It must be idempotent, and cheap once there is nothing left to do.
	ReleaseRun(ctx context.Context, run *v1alpha1.TeardownRun) error
}

// Releaser is implemented by actions that make something an attempt leaves behind (a Job). When
// an attempt ends in a pass (with the action's own result, as a failure to retry, or without a
// result: a timeout, break glass), the engine calls Release after the run's status is written,
// so the action can stop or clean up what the attempt made. Release must be quick and only logs
// what it cannot do: Owner.ReleaseRun makes up for it when the run ends.
type Releaser interface {
	Release(ctx context.Context, in *Input)
}

// Settler is implemented by actions whose work can end while no reconcile looks (a Job that
// completes while the operator is down). When a step's deadline has passed, the engine asks for
// the outcome of work that ended by the deadline before it fails the step as timed out.
type Settler interface {
	Settled(ctx context.Context, in *Input, deadline time.Time) (Result, bool)
}

// ServerChecker is implemented by actions whose step has the API server create an object made
// from the policy (a job step's Job). The engine calls CheckWithServer once per policy
// generation, after the policy compiled and before it reports it Ready, so that what the API
// server refuses in that object is reported when the policy is applied, not at a deletion, when
// the refusal keeps the object: the action asks for a server-side dry run of the create, values
// known only at run time (${...}) replaced by harmless placeholders. It returns the refusals on
// fields that hold no ${...}, at their paths in the policy; err says what kept the API server
// from answering (a transient error, no permission, a namespace missing or being deleted), which
// the engine logs and otherwise ignores: the step meets it, if it lasts, when it runs.
// runNamespace is the operator's namespace, where a cluster policy's objects go when it names
// no other.
type ServerChecker interface {
	CheckWithServer(ctx context.Context, runNamespace string) (field.ErrorList, error)
}

// ActionFunc adapts a function to an Action: scripted actions for tests and offline runs.
type ActionFunc func(ctx context.Context, in *Input) Result

// Execute implements Action.
func (f ActionFunc) Execute(ctx context.Context, in *Input) Result { return f(ctx, in) }

// Nop is an Action that succeeds at once, doing nothing.
type Nop struct{}

// Execute implements Action.
func (Nop) Execute(context.Context, *Input) Result { return Done("nothing to do") }

// Planner is implemented by actions that can say what an execution would do now without doing
// it (kubectl teardown plan): the request an http step would send, the Job a job step would
// create, whether a wait step's condition holds. A plan may read (Secrets, lookups) but never
// writes, sends or creates anything.
type Planner interface {
	Plan(ctx context.Context, in *Input) Plan
}

// Plan is what one execution of a step would do.
type Plan struct {
	// Summary says it in one line, for example "POST https://api.example.com/v1/snapshots".
	Summary string
	// Rendered is what would be sent or created, for display (secret values redacted).
	Rendered any
	// Err says why the step cannot be rendered now: its execution would fail with it.
	Err string
	// Access lists the API calls the step would make as an identity the policy names (a
	// resource step's ServiceAccount), for the plan to ask the API server whether it may.
	Access []Access
}

// Access is one API call a step would make, as RBAC sees it.
type Access struct {
	// User is the identity the call is made as (system:serviceaccount:<ns>:<name>); empty for
	// the operator itself, and Groups the groups the API server gives it.
	User   string
	Groups []string
	// Verb is RBAC's verb: get, list, create, patch, delete.
	Verb        string
	GVK         schema.GroupVersionKind
	Subresource string
	Namespace   string
	Name        string
}
