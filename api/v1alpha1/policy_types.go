package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RunHistory says which deletions leave a TeardownRun behind.
// +kubebuilder:validation:Enum=SkipImmediateSuccess;All;Always;OnFailure
type RunHistory string

const (
	// RunHistorySkipImmediateSuccess (the default) records a TeardownRun for every pipeline that
	// fails, is abandoned or retried, or does not finish in its first pass; one whose every step
	// is done at once leaves none.
	RunHistorySkipImmediateSuccess RunHistory = "SkipImmediateSuccess"
	// RunHistoryAll records a TeardownRun for every deletion: the audit mode.
	RunHistoryAll RunHistory = "All"
	// RunHistoryAlways is the earlier name of All; still accepted.
	RunHistoryAlways RunHistory = "Always"
	// RunHistoryOnFailure is the earlier name of SkipImmediateSuccess; still accepted.
	RunHistoryOnFailure RunHistory = "OnFailure"
)

// RecordsAll reports whether h keeps a TeardownRun for every deletion (All, or its old name).
func (h RunHistory) RecordsAll() bool { return h == RunHistoryAll || h == RunHistoryAlways }

// Trigger says when a policy's pipeline runs: after the DELETE, held by a finalizer, or before it,
// on a delete request.
// +kubebuilder:validation:Enum=Finalizer;DeleteRequest
type Trigger string

const (
	// TriggerFinalizer runs the pipeline once the object is being deleted, while the policy's
	// finalizer holds it. Right for kinds whose own controller waits for foreign finalizers
	// (or has nothing to clean up).
	TriggerFinalizer Trigger = "Finalizer"
	// TriggerDeleteRequest runs the pipeline before the object is deleted, while its own
	// controller still sees it alive: a plain DELETE is refused, a delete request (annotation
	// teardown.dev/delete-requested) starts the pipeline, and the operator deletes the object
	// once it succeeded. Right for kinds whose controller acts the moment deletion starts.
	TriggerDeleteRequest Trigger = "DeleteRequest"
)

// FailurePolicy says what happens to a target whose pipeline failed.
// +kubebuilder:validation:Enum=Retain;Release
type FailurePolicy string

const (
	// FailurePolicyRetain keeps the finalizer, so the target stays until someone acts.
	FailurePolicyRetain FailurePolicy = "Retain"
	// FailurePolicyRelease removes the finalizer anyway, so the deletion completes.
	FailurePolicyRelease FailurePolicy = "Release"
)

// OnFailure says what a failed step does to the rest of the pipeline.
// +kubebuilder:validation:Enum=Fail;Continue
type OnFailure string

const (
	// OnFailureFail ends the pipeline as Failed.
	OnFailureFail OnFailure = "Fail"
	// OnFailureContinue records the failure and goes on with the next step.
	OnFailureContinue OnFailure = "Continue"
)

// TargetReference names the kind of object a policy protects.
type TargetReference struct {
	// apiVersion of the target kind, for example "v1" or "databases.example.com/v1".
	// Resources of the teardown.dev group cannot be targets.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('teardown.dev/')",message="teardown.dev resources cannot be targets"
	APIVersion string `json:"apiVersion"`

	// kind of the target, for example "ConfigMap" or "Database".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Kind string `json:"kind"`
}

// TeardownPolicySpec is what a policy protects and the pipeline run before each such object goes.
type TeardownPolicySpec struct {
	// targetRef names the kind of object to protect. It cannot change: the policy's finalizer is
	// on objects of this kind; to protect another kind, create another policy.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="targetRef is immutable; create another policy for another kind"
	TargetRef TargetReference `json:"targetRef"`

	// selector picks targets by label. Unset or empty selects every object of the kind in scope.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// match is a CEL condition over `object` (the full target) that a target must also meet.
	// Example: "object.?spec.?engine.orValue('') == 'postgres'". An object on which match fails
	// to evaluate (a missing field, say) is left as it is, with a Warning event MatchFailed and a
	// count in status.matchErrors: write it to hold on every object (has(), ?. and orValue).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Match string `json:"match,omitempty"`

	Pipeline `json:",inline"`

	// runHistory says which deletions leave a TeardownRun behind. SkipImmediateSuccess (the
	// default) records every pipeline that fails, is abandoned or retried, or does not finish in
	// its first pass (anything that waits, retries or runs a Job), from its first pass on; a
	// pipeline whose every step is done at once releases its object with no run and no event on
	// the object: the policy's one TeardownSucceeded event series counts such teardowns. Each
	// still leaves an unsampled "teardown ended" log line (the audit trail to ship to a log
	// store), the metrics, and a line in this policy's status.teardowns and
	// status.recentTeardowns. It costs the API server one write, the release, where All costs
	// three (the run, its status, and the release; docs/benchmarks.md). All records a run for every deletion:
	// the audit mode; a run that ends in its first pass is then the record, with no event on
	// the object (the policy's series counts them). Always and OnFailure, the earlier names of All and
	// SkipImmediateSuccess, are still accepted. A two-phase policy (trigger DeleteRequest)
	// records every run. Either way a crash repeats at most the steps of one pass, with the
	// same Idempotency-Key.
	// +optional
	// +kubebuilder:default=SkipImmediateSuccess
	RunHistory RunHistory `json:"runHistory,omitempty"`

	// trigger says when the pipeline runs. Finalizer (the default) runs it once the object is
	// being deleted, held by the policy's finalizer: the object's own controller sees the
	// deletion at once, so use it for kinds whose controller waits for foreign finalizers.
	// DeleteRequest runs it before the DELETE, with the object untouched: a plain delete of a
	// protected object is refused (ValidatingAdmissionPolicy teardown.dev-deletion-guard) with a
	// message saying how to request it: the annotation teardown.dev/delete-requested="<who>:
	// <why>" (or `kubectl teardown delete KIND/NAME --reason ...`). The operator then runs the
	// pipeline and, once it succeeded, deletes the object itself. If it fails the object stays
	// as it was; removing the annotation withdraws the request and cancels the run. Deleting the
	// object's namespace counts as a request.
	// +optional
	// +kubebuilder:default=Finalizer
	Trigger Trigger `json:"trigger,omitempty"`

	// suspend releases every target: the finalizer is removed from all of them and in-flight runs
	// are abandoned. Use it to break glass when the pipeline itself is at fault.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// deletionGuard refuses the deletion of a protected object while its deny condition holds:
	// a veto before the DELETE, where the pipeline runs after it.
	// +optional
	DeletionGuard *DeletionGuard `json:"deletionGuard,omitempty"`
}

// GuardNamespaceDeletion says whether a deletion guard also holds when the object's namespace
// is being deleted.
// +kubebuilder:validation:Enum=Allow;Deny
type GuardNamespaceDeletion string

const (
	// GuardAllowNamespaceDeletion lets the object go with its namespace: the guard refuses only
	// a deletion of the object itself.
	GuardAllowNamespaceDeletion GuardNamespaceDeletion = "Allow"
	// GuardDenyNamespaceDeletion refuses the deletion also when the namespace goes: the namespace
	// stays Terminating until the guard stops holding.
	GuardDenyNamespaceDeletion GuardNamespaceDeletion = "Deny"
)

// DeletionGuard is a condition under which a protected object may not be deleted. The operator
// evaluates it whenever the object or a looked-up object changes and publishes the verdict on
// the object (label teardown.dev/deletion-guard, annotation teardown.dev/deletion-guard-message);
// the ValidatingAdmissionPolicy teardown.dev-deletion-guard shipped with the operator refuses a
// DELETE of an object whose verdict is Deny, with the message.
type DeletionGuard struct {
	// deny is a CEL condition over `object` and the lookups: while it is true, the object may not
	// be deleted. Example: "size(children) > 0".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Deny string `json:"deny"`

	// message tells whoever tries to delete the object why not, with ${...} interpolation over
	// `object` and the lookups. Example: "${object.metadata.name} still has ${size(children)} children".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`

	// lookups bind other objects for deny and message, as in a wait step.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Lookups []Lookup `json:"lookups,omitempty"`

	// namespaceDeletion says what the guard does when the object's namespace is deleted: Allow
	// (the default) lets the object go with it, so that a guard never makes a namespace
	// undeletable by accident; Deny refuses then too, and the namespace stays Terminating until
	// the guard stops holding.
	// +optional
	// +kubebuilder:default=Allow
	NamespaceDeletion GuardNamespaceDeletion `json:"namespaceDeletion,omitempty"`
}

// ClusterTeardownPolicySpec is a TeardownPolicySpec that may also pick namespaces.
type ClusterTeardownPolicySpec struct {
	TeardownPolicySpec `json:",inline"`

	// namespaceSelector picks the namespaces whose objects are targets. Unset selects all
	// namespaces. Ignored for cluster-scoped kinds.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// TeardownPolicyStatus is what the operator observed of a policy.
type TeardownPolicyStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready says whether the policy is valid, its target kind served and its targets
	// protected; when it is False the reason and message name the field at fault.
	// ProtectedFromCreation says whether a MutatingAdmissionPolicy adds the policy's finalizer to
	// the objects it selects when they are created, even while the operator is down (True), or,
	// with the reason, why they are armed only once the operator sees them. VetoEnforced says
	// whether the admission policy that enforces a deletion guard or a two-phase trigger is
	// installed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// finalizer is the finalizer this policy puts on its targets.
	// +optional
	Finalizer string `json:"finalizer,omitempty"`

	// protected is how many objects currently carry this policy's finalizer.
	// +optional
	Protected int32 `json:"protected"`

	// activeRuns is how many of this policy's runs are in progress.
	// +optional
	ActiveRuns int32 `json:"activeRuns"`

	// stuckRuns is how many of this policy's runs have been in progress, or failed and kept
	// their object, for longer than the operator's --stuck-after.
	// +optional
	StuckRuns int32 `json:"stuckRuns"`

	// matchErrors is how many objects the selector picks whose `match` fails to evaluate (a
	// missing field, say). Such an object is left as it is: a finalizer already on it stays and
	// none is added. Each gets a Warning event, reason MatchFailed.
	// +optional
	MatchErrors int32 `json:"matchErrors"`

	// teardowns counts how this policy's pipelines ended, whether or not a TeardownRun was
	// kept. It counts ends, not objects: a run that failed and was then retried or abandoned
	// counts once for each end. Teardowns that ended in the seconds before an operator replica
	// stopped may be missing; the "teardown ended" log line has them.
	// +optional
	Teardowns TeardownCounts `json:"teardowns"`

	// recentTeardowns are the last teardowns of this policy that ended, newest first.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	RecentTeardowns []RecentTeardown `json:"recentTeardowns,omitempty"`
}

// TeardownCounts counts the ends of a policy's teardowns by outcome.
type TeardownCounts struct {
	// succeeded counts pipelines that ended with every step done.
	// +optional
	Succeeded int64 `json:"succeeded"`
	// failed counts pipelines that ended Failed.
	// +optional
	Failed int64 `json:"failed"`
	// abandoned counts teardowns someone broke glass on (or whose policy was suspended).
	// +optional
	Abandoned int64 `json:"abandoned"`
	// cancelled counts two-phase teardowns whose delete request was withdrawn.
	// +optional
	Cancelled int64 `json:"cancelled"`
}

// RecentTeardown is one teardown that ended.
type RecentTeardown struct {
	// target is the object torn down.
	Target TargetObjectReference `json:"target"`
	// outcome is how its pipeline ended.
	// +kubebuilder:validation:Enum=Succeeded;Failed;Abandoned;Cancelled
	Outcome RunPhase `json:"outcome"`
	// completionTime is when it ended.
	CompletionTime metav1.Time `json:"completionTime"`
	// run is the TeardownRun that records it, as namespace/name; empty when none was kept
	// (runHistory SkipImmediateSuccess).
	// +optional
	Run string `json:"run,omitempty"`
	// message says how it ended, cut to 256 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Message string `json:"message,omitempty"`
}

// TeardownPolicy runs a pipeline of steps before an object in its own namespace is deleted.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tdp,categories=teardown
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.targetRef.kind`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Protected",type=integer,JSONPath=`.status.protected`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.activeRuns`
// +kubebuilder:printcolumn:name="Stuck",type=integer,JSONPath=`.status.stuckRuns`,priority=1
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.teardowns.succeeded`,priority=1
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.teardowns.failed`,priority=1
// +kubebuilder:printcolumn:name="Last-Teardown",type=date,JSONPath=`.status.recentTeardowns[0].completionTime`,priority=1
// +kubebuilder:printcolumn:name="From-Creation",type=string,JSONPath=`.status.conditions[?(@.type=="ProtectedFromCreation")].status`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type TeardownPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TeardownPolicySpec `json:"spec"`
	// +optional
	Status TeardownPolicyStatus `json:"status,omitempty"`
}

// TeardownPolicyList is a list of TeardownPolicy.
// +kubebuilder:object:root=true
type TeardownPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TeardownPolicy `json:"items"`
}

// ClusterTeardownPolicy runs a pipeline of steps before an object, in any namespace it selects or
// cluster-scoped, is deleted. It is for cluster administrators.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ctdp,categories=teardown
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.targetRef.kind`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Protected",type=integer,JSONPath=`.status.protected`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.activeRuns`
// +kubebuilder:printcolumn:name="Stuck",type=integer,JSONPath=`.status.stuckRuns`,priority=1
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.teardowns.succeeded`,priority=1
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.teardowns.failed`,priority=1
// +kubebuilder:printcolumn:name="Last-Teardown",type=date,JSONPath=`.status.recentTeardowns[0].completionTime`,priority=1
// +kubebuilder:printcolumn:name="From-Creation",type=string,JSONPath=`.status.conditions[?(@.type=="ProtectedFromCreation")].status`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type ClusterTeardownPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ClusterTeardownPolicySpec `json:"spec"`
	// +optional
	Status TeardownPolicyStatus `json:"status,omitempty"`
}

// ClusterTeardownPolicyList is a list of ClusterTeardownPolicy.
// +kubebuilder:object:root=true
type ClusterTeardownPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterTeardownPolicy `json:"items"`
}
