package v1alpha1

import (
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// RunPhase is where a run's pipeline stands.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Abandoned;Cancelled
type RunPhase string

const (
	RunPending   RunPhase = "Pending"
	RunRunning   RunPhase = "Running"
	RunSucceeded RunPhase = "Succeeded"
	RunFailed    RunPhase = "Failed"
	// RunAbandoned means someone broke glass: the remaining steps were skipped and the target released.
	RunAbandoned RunPhase = "Abandoned"
	// RunCancelled means the delete request of a run with trigger DeleteRequest was withdrawn
	// before the pipeline succeeded: the object stays, untouched and protected. A new request
	// starts the pipeline again from its first step.
	RunCancelled RunPhase = "Cancelled"
)

// Finished reports whether the phase is final.
func (p RunPhase) Finished() bool {
	return p == RunSucceeded || p == RunFailed || p == RunAbandoned || p == RunCancelled
}

// Releases reports whether a run that ended in this phase lets its target go.
func (p RunPhase) Releases(fp FailurePolicy) bool {
	return p == RunSucceeded || p == RunAbandoned || p == RunFailed && fp == FailurePolicyRelease
}

// StepPhase is where one step stands.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Skipped
type StepPhase string

const (
	StepPending   StepPhase = "Pending"
	StepRunning   StepPhase = "Running"
	StepSucceeded StepPhase = "Succeeded"
	StepFailed    StepPhase = "Failed"
	StepSkipped   StepPhase = "Skipped"
)

// Finished reports whether the phase is final.
func (p StepPhase) Finished() bool {
	return p == StepSucceeded || p == StepFailed || p == StepSkipped
}

// PolicyReference identifies the policy a run executes.
type PolicyReference struct {
	// kind is TeardownPolicy or ClusterTeardownPolicy.
	// +kubebuilder:validation:Enum=TeardownPolicy;ClusterTeardownPolicy
	Kind string `json:"kind"`
	// namespace of a TeardownPolicy; empty for a ClusterTeardownPolicy.
	// +optional
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// generation of the policy whose pipeline the run copied.
	Generation int64 `json:"generation"`
}

// TargetObjectReference identifies the one object a run tears down.
type TargetObjectReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// +optional
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// TeardownRunSpec is fixed when the run is created: which policy, which object, and a copy of the
// pipeline, so that a policy edited or deleted mid-run does not change a run in flight.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
type TeardownRunSpec struct {
	PolicyRef PolicyReference       `json:"policyRef"`
	Target    TargetObjectReference `json:"target"`
	// finalizer is the finalizer the run removes from the target when it is done.
	Finalizer string `json:"finalizer"`
	// trigger is the policy's trigger when the run began. A DeleteRequest run executes its
	// steps against the live object and deletes it once they succeeded; empty means Finalizer.
	// +optional
	Trigger Trigger `json:"trigger,omitempty"`
	// pipeline is the policy's pipeline as it was when the deletion began.
	Pipeline Pipeline `json:"pipeline"`
	// object is the target as it was when the deletion began: `object` in expressions.
	// The data of a Secret is never copied. A run recorded finished in its first pass, of a
	// pipeline that reads no more of the object than the metadata the operator caches, keeps
	// that metadata alone: the object is not read for it.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Object runtime.RawExtension `json:"object,omitempty"`
}

// StepStatus records one step of a run.
type StepStatus struct {
	Name  string    `json:"name"`
	Phase StepPhase `json:"phase"`
	// attempts made so far, the current one included. A retry of the run goes on counting, so
	// that every attempt has a number (and a Job name) of its own.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// firstAttempt is the number of the step's first attempt since it last started, when the
	// run was retried; retry.limit counts the attempts from it.
	// +optional
	FirstAttempt int32 `json:"firstAttempt,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// nextCheckTime is when the step is looked at again (a change to an object it watches may
	// bring that forward).
	// +optional
	NextCheckTime *metav1.Time `json:"nextCheckTime,omitempty"`
	// retryTime is when the next attempt starts, after a failed one. It is precise to the
	// microsecond, so that short backoffs and Retry-After are kept exactly.
	// +optional
	RetryTime *metav1.MicroTime `json:"retryTime,omitempty"`
	// deadline is when the step times out.
	// +optional
	Deadline *metav1.MicroTime `json:"deadline,omitempty"`
	// message says what happened last, in words.
	// +optional
	Message string `json:"message,omitempty"`
	// outputs are values later steps read as steps.<name>.outputs.<key>.
	// +optional
	Outputs map[string]apiextensionsv1.JSON `json:"outputs,omitempty"`
	// state is the step kind's own bookkeeping (for example the Job it created).
	// +optional
	State map[string]string `json:"state,omitempty"`
	// approval is an approval step's request and the answers it counted: who approved or
	// rejected, when, why, and as which authenticated identity.
	// +optional
	Approval *ApprovalStatus `json:"approval,omitempty"`
}

// RunRetry records one retry of a failed run.
type RunRetry struct {
	// time the retry started.
	Time metav1.Time `json:"time"`
	// requestedBy is the teardown.dev/retry annotation's value and the user who set it, as the
	// admission policy teardown.dev-requests authenticated them.
	RequestedBy string `json:"requestedBy"`
	// requestedAt is when the annotation was set (from the run's managed fields): a request is
	// acted on once.
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`
	// fromStep is the step the pipeline resumed at.
	FromStep string `json:"fromStep"`
	// failure is what the run had failed with.
	// +optional
	Failure string `json:"failure,omitempty"`
}

// TeardownRunStatus is the progress of a run's pipeline.
type TeardownRunStatus struct {
	// +optional
	Phase RunPhase `json:"phase,omitempty"`
	// currentStep is the step the pipeline is at.
	// +optional
	CurrentStep string `json:"currentStep,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=name
	Steps []StepStatus `json:"steps,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// deadline is when the whole pipeline times out.
	// +optional
	Deadline *metav1.MicroTime `json:"deadline,omitempty"`
	// requestedBy says who requested the deletion of a run with trigger DeleteRequest: the user
	// who set the teardown.dev/delete-requested annotation (as the admission policy
	// teardown.dev-requests authenticated them) and why, or the deletion of the object or of its
	// namespace.
	// +optional
	RequestedBy string `json:"requestedBy,omitempty"`
	// cancelledBy says why a run with trigger DeleteRequest was cancelled.
	// +optional
	CancelledBy string `json:"cancelledBy,omitempty"`
	// abandonedBy says who broke glass (the user who set teardown.dev/abandon, as the admission
	// policy teardown.dev-requests authenticated them, and why), or how (spec.suspend).
	// +optional
	AbandonedBy string `json:"abandonedBy,omitempty"`
	// retries is how many times the run was retried after it failed (annotation
	// teardown.dev/retry on the run).
	// +optional
	Retries int32 `json:"retries,omitempty"`
	// lastRetry records the latest retry.
	// +optional
	LastRetry *RunRetry `json:"lastRetry,omitempty"`
	// message sums up the run's outcome.
	// +optional
	Message string `json:"message,omitempty"`
	// ending, set while the finally steps run, is how the pipeline ended: the phase and message
	// the run takes once they are done.
	// +optional
	Ending *RunEnding `json:"ending,omitempty"`
	// endings counts how often the pipeline ended with finally steps to run (a run retried after
	// a failure, or abandoned after it failed, ends again).
	// +optional
	Endings int32 `json:"endings,omitempty"`
	// finally are the finally steps of the latest ending.
	// +optional
	// +listType=map
	// +listMapKey=name
	Finally []StepStatus `json:"finally,omitempty"`
	// stuckTime is when the run was found stuck (--stuck-after) and its onStuck steps started.
	// +optional
	StuckTime *metav1.Time `json:"stuckTime,omitempty"`
	// onStuck are the onStuck steps, once the run was found stuck.
	// +optional
	// +listType=map
	// +listMapKey=name
	OnStuck []StepStatus `json:"onStuck,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Step returns the status of the named step, finally step or onStuck step, or nil.
func (s *TeardownRunStatus) Step(name string) *StepStatus {
	for i := range s.Steps {
		if s.Steps[i].Name == name {
			return &s.Steps[i]
		}
	}
	for i := range s.Finally {
		if s.Finally[i].Name == name {
			return &s.Finally[i]
		}
	}
	for i := range s.OnStuck {
		if s.OnStuck[i].Name == name {
			return &s.OnStuck[i]
		}
	}
	return nil
}

// AllSteps returns the statuses of the steps, then the finally steps, then the onStuck steps.
func (s *TeardownRunStatus) AllSteps() []StepStatus {
	return slices.Concat(s.Steps, s.Finally, s.OnStuck)
}

// RunEnding is how a run's pipeline ended, kept while its finally steps run.
type RunEnding struct {
	// phase is the run's phase once the finally steps are done.
	// +kubebuilder:validation:Enum=Succeeded;Failed;Abandoned;Cancelled
	Phase RunPhase `json:"phase"`
	// message is the run's message then.
	Message string `json:"message"`
	// time the pipeline ended.
	Time metav1.Time `json:"time"`
}

// TeardownRun records the teardown pipeline run for one deletion of one target by one policy.
// A Failed run that keeps its object (failurePolicy Retain) resumes at the step that failed, with
// fresh attempts, when annotated `teardown.dev/retry=<your user name>: <why>`; the operator records
// the retry in status.lastRetry and removes the annotation. Annotate the object
// `teardown.dev/abandon=<your user name>: <why>` instead to release it without the rest of the
// cleanup (it takes RBAC verb delete on the object).
//
// Only the operator writes a run's status, through the status subresource, which no role but the
// operator's grants: what a run records (approvals, step states, who broke glass) decides what the
// operator does next, so nobody who may annotate a run may write it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tdr,categories=teardown
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policyRef.name`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.target.kind`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.target.name`
// +kubebuilder:printcolumn:name="Target-Namespace",type=string,JSONPath=`.spec.target.namespace`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.currentStep`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TeardownRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TeardownRunSpec `json:"spec"`
	// +optional
	Status TeardownRunStatus `json:"status,omitempty"`
}

// TeardownRunList is a list of TeardownRun.
// +kubebuilder:object:root=true
type TeardownRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TeardownRun `json:"items"`
}
