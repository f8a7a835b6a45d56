package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RetryPolicy says how often a failed step is tried again, and how long to wait in between.
type RetryPolicy struct {
	// limit is how many times the step is tried again after its first attempt fails.
	// 0 (the default) means the step is tried once.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Limit int32 `json:"limit,omitempty"`

	// backoff is the wait before the first retry; it doubles with each retry up to maxBackoff.
	// Defaults to 5s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (one year)"
	Backoff *metav1.Duration `json:"backoff,omitempty"`

	// maxBackoff caps the wait between retries. Defaults to 5m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (one year)"
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`
}

// Lookup declares objects a wait step's `until` condition can read, as a list bound to `name`.
type Lookup struct {
	// name is the CEL variable the matching objects are bound to, as a list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_][a-zA-Z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['object', 'steps', 'run', 'response', 'job', 'resource', 'now'])",message="name is reserved: object, steps, run, response, job, resource and now are built-in variables"
	Name string `json:"name"`

	// apiVersion of the objects to look up.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`

	// kind of the objects to look up.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`

	// selector picks the objects by label. Label values may use ${...} CEL interpolation over the
	// target, for example "${object.metadata.name}". Empty selects every object of the kind.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// namespace to look in, with ${...} interpolation. Defaults to the target's namespace.
	// A namespaced policy may look only in its own namespace. Ignored for cluster-scoped kinds.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Namespace string `json:"namespace,omitempty"`
}

// WaitStep waits for a fixed time, or until a CEL condition holds.
// +kubebuilder:validation:XValidation:rule="has(self.duration) != has(self.until)",message="set exactly one of duration or until"
// +kubebuilder:validation:XValidation:rule="!has(self.lookups) || has(self.until)",message="lookups are read only by until"
type WaitStep struct {
	// duration to wait, for example "30s". The wait is measured from the step's start and survives
	// operator restarts.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (one year)"
	Duration *metav1.Duration `json:"duration,omitempty"`

	// until is a CEL condition over `object` (the target), `steps`, `run` and the lookups;
	// the step succeeds when it is true. Example: "size(children) == 0".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Until string `json:"until,omitempty"`

	// lookups bind lists of other objects to CEL variables for `until`.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Lookups []Lookup `json:"lookups,omitempty"`

	// interval between checks of `until`. A change to a looked-up object triggers a check at once.
	// Defaults to 10s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (one year)"
	Interval *metav1.Duration `json:"interval,omitempty"`
}

// Step is one action of a teardown pipeline. Exactly one kind (wait, http, job, resource or
// approval) is set.
// +kubebuilder:validation:XValidation:rule="[has(self.wait), has(self.http), has(self.job), has(self.resource), has(self.approval)].filter(k, k).size() == 1",message="set exactly one step kind: wait, http, job, resource or approval"
type Step struct {
	// name identifies the step in the pipeline and in `steps.<name>` expressions: a DNS label,
	// unique in the policy.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// when is a CEL guard over `object`, `steps` (earlier steps only) and `run`; when false the
	// step is Skipped. An evaluation error (a missing field, say) fails the step, so write it to
	// hold on every object: "object.metadata.?labels[?'tier'].orValue('') == 'prod'" or
	// "has(object.spec.snapshot) && object.spec.snapshot". See docs/expressions.md.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	When string `json:"when,omitempty"`

	// timeout bounds the step from its first attempt, retries included. Unset means no bound.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (one year)"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// retry says how a failed attempt is retried.
	// +optional
	Retry *RetryPolicy `json:"retry,omitempty"`

	// onFailure says whether a failed step ends the pipeline (Fail, the default) or lets it go on
	// (Continue).
	// +optional
	// +kubebuilder:default=Fail
	OnFailure OnFailure `json:"onFailure,omitempty"`

	// wait pauses the pipeline for a duration or until a condition holds.
	// +optional
	Wait *WaitStep `json:"wait,omitempty"`

	// http calls an HTTP endpoint, optionally polling it until a condition holds.
	// +optional
	HTTP *HTTPStep `json:"http,omitempty"`

	// job runs a Kubernetes Job and waits for it to complete.
	// +optional
	Job *JobStep `json:"job,omitempty"`

	// resource creates, applies, patches or deletes Kubernetes objects as a ServiceAccount, and
	// may wait until the object reaches a condition.
	// +optional
	Resource *ResourceStep `json:"resource,omitempty"`

	// approval waits until people with the RBAC verb "approve" on the run approve (kubectl
	// teardown approve), or one of them rejects (kubectl teardown reject), which fails the step.
	// +optional
	Approval *ApprovalStep `json:"approval,omitempty"`
}

// AllSteps returns the steps, then the finally steps, then the onStuck steps.
func (p *Pipeline) AllSteps() []Step {
	return slices.Concat(p.Steps, p.Finally, p.OnStuck)
}

// Pipeline is the part of a policy that a run executes: the steps and what bounds them.
// +kubebuilder:validation:XValidation:rule="!has(self.finally) || self.finally.all(f, !has(f.approval))",message="finally steps cannot be approval steps: they run after the pipeline has ended"
// +kubebuilder:validation:XValidation:rule="!has(self.finally) || self.finally.all(f, !self.steps.exists(s, s.name == f.name))",message="a finally step cannot have the name of a step: both are read as steps.<name>"
// +kubebuilder:validation:XValidation:rule="!has(self.onStuck) || self.onStuck.all(f, !has(f.approval))",message="onStuck steps cannot be approval steps"
// +kubebuilder:validation:XValidation:rule="!has(self.onStuck) || self.onStuck.all(f, !self.steps.exists(s, s.name == f.name) && !(has(self.finally) && self.finally.exists(s, s.name == f.name)))",message="an onStuck step cannot have the name of a step or finally step: all are read as steps.<name>"
type Pipeline struct {
	// steps run in order.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Steps []Step `json:"steps"`

	// finally steps run, in order, once the pipeline has ended, whatever the ending: Succeeded,
	// Failed (a step failed, the pipeline timed out), Abandoned (break glass) or Cancelled. They
	// are for notifications and clean-up. Their `when` reads `run.phase` (the ending) and
	// `run.message`, and `steps` (every step, and the finally steps before). They never change
	// the ending, each runs at most for its own timeout (5m when unset or 0), and one that fails is
	// recorded and the next runs: the object is released, or kept, as the ending says once they
	// are done. A run that ends again (retried after a failure, abandoned after it failed) runs
	// them again. Example: notify a chat when run.phase != 'Succeeded'.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Finally []Step `json:"finally,omitempty"`

	// onStuck steps run once per run, beside the pipeline, when the run becomes stuck: in flight,
	// or failed and keeping its object, for longer than the operator's --stuck-after (15m by
	// default: the threshold of the teardown_runs_stuck metric and status.stuckRuns), so that a
	// person hears of it before the alert escalates. Their `when` reads `run.phase` (Running or
	// Failed), `run.message` and `steps`. They change nothing of the pipeline, each runs at most
	// for its own timeout (5m when unset or 0), and those not done when the run ends are skipped.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=4
	OnStuck []Step `json:"onStuck,omitempty"`

	// failurePolicy says what happens to the target when the pipeline fails: Retain (the default)
	// keeps the finalizer so the object stays; Release removes it so the deletion completes.
	// +optional
	// +kubebuilder:default=Retain
	FailurePolicy FailurePolicy `json:"failurePolicy,omitempty"`

	// timeout bounds the whole pipeline from the start of the run. Unset means no bound.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (one year)"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}
