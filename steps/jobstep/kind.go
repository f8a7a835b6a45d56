package jobstep

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsjson "sigs.k8s.io/json"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/steps"
)

// RBAC: Jobs are created and watched; failed pods and their logs are read for the step message.
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get

// Defaults and limits.
const (
	// DefaultTTL is how long a finished Job is kept after the step recorded its outcome, when the
	// template sets no ttlSecondsAfterFinished.
	DefaultTTL = time.Hour
	// DefaultRecheck is how often a running Job is looked at when no change to it woke the run.
	DefaultRecheck = time.Minute
	// LogTailLines is how many lines of a failed pod's log the step message quotes.
	LogTailLines = 20
	// LogTailBytes bounds the quoted log.
	LogTailBytes = 2048
	// VarJob is the CEL variable successCondition reads the Job from.
	VarJob = "job"
	// MaxTemplated bounds the strings with ${...} in one template: each is evaluated, within the
	// per-expression cost limit, whenever the step creates a Job.
	MaxTemplated = 64
)

// Options configure the job step kind.
type Options struct {
	// Recheck is how often a running Job is looked at without a change waking its run.
	Recheck time.Duration
	// LogTimeout bounds the reading of a failed pod's log.
	LogTimeout time.Duration
}

// Kind is the job step kind.
type Kind struct {
	client      client.Client // cached for the Jobs the engine watches; writes
	reader      client.Reader // the API server
	logs        LogReader
	terminating func(ctx context.Context, namespace string) bool
	recheck     time.Duration
	logWait     time.Duration
}

// New returns the job kind. c reads Jobs from the cache (the engine watches the labelled ones)
// and writes; reader reads from the API server; logs reads failed pods' logs; terminating tells
// whether a namespace is being deleted (steps.Deps.NamespaceTerminating).
func New(c client.Client, reader client.Reader, logs LogReader, terminating func(context.Context, string) bool, opts Options) *Kind {
	if opts.Recheck <= 0 {
		opts.Recheck = DefaultRecheck
	}
	if opts.LogTimeout <= 0 {
		opts.LogTimeout = 3 * time.Second
	}
	return &Kind{client: c, reader: reader, logs: logs, terminating: terminating, recheck: opts.Recheck, logWait: opts.LogTimeout}
}

// Name implements steps.Kind.
func (*Kind) Name() string { return "job" }

// BindsRun implements steps.RunBinder: a step's Job is owned by its run, which must exist.
func (*Kind) BindsRun() bool { return true }

// JobType is the type of job in successCondition: a batch/v1 Job, so that a misspelt field is
// refused when the policy is compiled. Built on first use, by the first policy with a job step.
var JobType = sync.OnceValue(func() expr.Type { return expr.TypeOf(reflect.TypeFor[batchv1.Job](), "batch.v1.Job") })

// Output keys of a job step.
const (
	OutputJobName      = "jobName"
	OutputJobNamespace = "jobNamespace"
)

// Variables implements steps.VariableDeclarer.
func (*Kind) Variables() []string { return []string{VarJob} }

// Outputs implements steps.OutputDeclarer.
func (*Kind) Outputs(*v1alpha1.Step) []string {
	return []string{OutputJobName, OutputJobNamespace}
}

// Configured implements steps.Kind.
func (*Kind) Configured(s *v1alpha1.Step) bool { return s.Job != nil }

// Owns implements steps.Owner: the engine watches the Jobs steps create.
func (*Kind) Owns() []client.Object { return []client.Object{&batchv1.Job{}} }

// action is a compiled job step.
type action struct {
	kind       *Kind
	step       string
	namespaced bool
	// namespace renders the Job's namespace; nil means the default (the policy's namespace for a
	// TeardownPolicy, the target's for a ClusterTeardownPolicy).
	namespace   *expr.Template
	labels      map[string]*expr.Template
	annotations map[string]*expr.Template
	spec        *expr.Tree
	success     *expr.Program
	ttl         int32
	// policyNamespace is a TeardownPolicy's namespace, and path the step's job field: for
	// CheckWithServer, which runs outside any run.
	policyNamespace string
	path            *field.Path
}

// placeholder stands in for every ${...} when the template's shape is checked at compile time:
// "0" is a valid string, quantity and int-or-string, so only fields that can never hold a
// rendered string are reported; the API server's checks of the values it stands for are skipped
// (validateJobSpec).
const placeholder = "0"

// Compile implements steps.Kind.
func (k *Kind) Compile(cc steps.CompileContext, s *v1alpha1.Step, path *field.Path) (steps.Action, field.ErrorList) {
	j := s.Job
	p := path.Child("job")
	a := &action{kind: k, step: s.Name, namespaced: cc.Namespaced, ttl: int32(DefaultTTL / time.Second), policyNamespace: cc.Namespace, path: p}
	var errs field.ErrorList
	if j.Namespace == "" && !cc.Namespaced && cc.TargetScope == steps.ScopeCluster {
		// The default is the target's namespace, and a cluster-scoped object has none: the
		// run would fail at this step with the object held.
		errs = append(errs, field.Required(p.Child("namespace"), fmt.Sprintf(
			"%s is cluster-scoped, so there is no target namespace to run the Job in: name one (a ClusterTeardownPolicy may run Jobs in any namespace)", cc.Target.Kind)))
	}
	if j.Namespace != "" {
		if cc.Namespaced && j.Namespace != cc.Namespace {
			errs = append(errs, field.Forbidden(p.Child("namespace"), fmt.Sprintf("a TeardownPolicy runs Jobs only in its own namespace %q", cc.Namespace)))
		} else if t, err := cc.Env.CompileTemplate(j.Namespace); err != nil {
			errs = append(errs, field.Invalid(p.Child("namespace"), j.Namespace, err.Error()))
		} else {
			a.namespace = t
		}
	}
	mp := p.Child("template", "metadata")
	var merrs field.ErrorList
	a.labels, merrs = compileMeta(cc.Env, j.Template.Metadata.Labels, mp.Child("labels"), true)
	errs = append(errs, merrs...)
	a.annotations, merrs = compileMeta(cc.Env, j.Template.Metadata.Annotations, mp.Child("annotations"), false)
	errs = append(errs, merrs...)
	errs = append(errs, a.compileSpec(cc.Env, j.Template.Spec.Raw, p.Child("template", "spec"))...)
	if j.SuccessCondition != "" {
		env, err := cc.Env.Declare(expr.Var{Name: VarJob, Type: JobType()})
		if err != nil {
			return nil, append(errs, field.InternalError(p, err))
		}
		if a.success, err = env.CompileCondition(j.SuccessCondition); err != nil {
			errs = append(errs, field.Invalid(p.Child("successCondition"), j.SuccessCondition, err.Error()))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return a, nil
}

// compileMeta compiles label or annotation values. Keys are literal; the teardown.dev/ prefix
// is the operator's.
func compileMeta(env *expr.Env, m map[string]string, path *field.Path, isLabel bool) (map[string]*expr.Template, field.ErrorList) {
	var errs field.ErrorList
	out := make(map[string]*expr.Template, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kp := path.Key(k)
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, field.Invalid(kp, k, strings.Join(msgs, "; ")))
			continue
		}
		if prefix, _, ok := strings.Cut(k, "/"); ok && (prefix == naming.Domain || strings.HasSuffix(prefix, "."+naming.Domain)) {
			errs = append(errs, field.Forbidden(kp, fmt.Sprintf("the %s/ prefix is the operator's", naming.Domain)))
			continue
		}
		t, err := env.CompileTemplate(m[k])
		if err != nil {
			errs = append(errs, field.Invalid(kp, m[k], err.Error()))
			continue
		}
		if isLabel && t.Literal() {
			if msgs := validation.IsValidLabelValue(t.String()); len(msgs) > 0 {
				errs = append(errs, field.Invalid(kp, m[k], strings.Join(msgs, "; ")))
				continue
			}
		}
		out[k] = t
	}
	return out, errs
}

// compileSpec compiles every string of the JobSpec template and checks its shape against
// batch/v1: unknown fields, values of the wrong type, and what the operator itself controls.
func (a *action) compileSpec(env *expr.Env, raw []byte, path *field.Path) field.ErrorList {
	if len(raw) == 0 {
		return field.ErrorList{field.Required(path, "a JobSpec: at least template.spec.containers")}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return field.ErrorList{field.Invalid(path, field.OmitValueType{}, err.Error())}
	}
	if _, ok := v.(map[string]any); !ok {
		return field.ErrorList{field.Invalid(path, field.OmitValueType{}, "must be an object (a batch/v1 JobSpec)")}
	}
	tree, errs := env.CompileTree(v, path)
	a.spec = tree
	if n := tree.Templated(); n > MaxTemplated {
		errs = append(errs, field.Invalid(path, field.OmitValueType{}, fmt.Sprintf("%d strings hold ${...}; at most %d may", n, MaxTemplated)))
	}
	shape, err := json.Marshal(tree.Placeholder(placeholder))
	if err != nil {
		return field.ErrorList{field.InternalError(path, err)}
	}
	var spec batchv1.JobSpec
	strict, err := sigsjson.UnmarshalStrict(shape, &spec, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
	for _, e := range strict {
		errs = append(errs, field.Invalid(path, field.OmitValueType{}, e.Error()))
	}
	if err != nil {
		// Decoding goes on past a value of the wrong type, so the checks below still apply.
		detail := err.Error()
		if strings.Contains(detail, "cannot unmarshal string") {
			detail += " (write numbers and booleans without quotes; a ${...} always renders a string, so it cannot fill a number or boolean field)"
		}
		errs = append(errs, field.Invalid(path, field.OmitValueType{}, detail))
	}
	if spec.Selector != nil {
		errs = append(errs, field.Forbidden(path.Child("selector"), "the Job controller chooses the selector"))
	}
	if spec.ManualSelector != nil && *spec.ManualSelector {
		errs = append(errs, field.Forbidden(path.Child("manualSelector"), "the Job controller chooses the selector"))
	}
	errs = append(errs, validateJobSpec(&spec, path, tree.RenderedAt)...)
	if spec.TTLSecondsAfterFinished != nil {
		if *spec.TTLSecondsAfterFinished < 0 {
			errs = append(errs, field.Invalid(path.Child("ttlSecondsAfterFinished"), *spec.TTLSecondsAfterFinished, "must not be negative"))
		}
		a.ttl = *spec.TTLSecondsAfterFinished
	}
	return errs
}
