package v1alpha1

// Well-known names: the labels, annotations, finalizers, condition types and reasons, and event
// reasons the operator reads and writes. They are part of the API (users select, alert and
// script on them) and never change once shipped; tools and tests read them from here.

// Annotations users set: requests. Each value is "<user>: <why>", <user> being the user name the
// API server authenticated for the write; the admission policy RequestsPolicyName admits no other
// value (and, for AnnotationAbandon and AnnotationDeleteRequested, only from a user RBAC lets
// delete the object), and the operator acts on none while that policy is not in force.
const (
	// AnnotationAbandon on a target breaks glass: its runs skip their remaining steps and release
	// the target. Who and why are recorded in the run.
	AnnotationAbandon = "teardown.dev/abandon"
	// AnnotationRetry on a Failed run that keeps its object resumes the pipeline at the step that
	// failed, with fresh attempts. Who and why are recorded in the run, and the operator removes
	// the annotation once the retry is recorded.
	AnnotationRetry = "teardown.dev/retry"
	// AnnotationDeleteRequested on an object protected by a policy with trigger DeleteRequest
	// requests its deletion: the operator runs the pipeline with the object alive and deletes it
	// once the pipeline succeeded. Who and why are recorded in the run. Removing it before the
	// pipeline succeeded cancels the run.
	AnnotationDeleteRequested = "teardown.dev/delete-requested"
)

// Finalizers the operator puts on its own objects. A policy's finalizer on its targets is
// <teardownpolicy|clusterteardownpolicy>.teardown.dev/<policy name> (see internal/naming).
const (
	// FinalizerRun keeps a run while its pipeline is in flight, so that deleting its namespace
	// (or the run) cannot lose the pipeline's state.
	FinalizerRun = "teardown.dev/run-in-progress"
	// FinalizerPolicy keeps a policy until its targets are released and its runs are done.
	FinalizerPolicy = "teardown.dev/release-targets"
)

// Labels of runs: which policy and which target.
const (
	LabelPolicyKind      = "teardown.dev/policy-kind"
	LabelPolicy          = "teardown.dev/policy"
	LabelPolicyNamespace = "teardown.dev/policy-namespace"
	LabelTargetUID       = "teardown.dev/target-uid"
	LabelTargetKind      = "teardown.dev/target-kind"
	LabelTargetNamespace = "teardown.dev/target-namespace"
	LabelTargetName      = "teardown.dev/target-name"
	// LabelReleased marks a finished run whose object is released: a record only, which the
	// operator no longer caches and deletes after --run-retention.
	LabelReleased = "teardown.dev/released"
)

// The verdict of a deletion guard, which the operator publishes on a protected object and the
// ValidatingAdmissionPolicy teardown.dev-deletion-guard enforces.
const (
	// LabelDeletionGuard is set while a policy's deletion guard holds: GuardDeny refuses a DELETE
	// of the object unless its namespace is being deleted, GuardDenyAlways refuses it then too.
	LabelDeletionGuard = "teardown.dev/deletion-guard"
	GuardDeny          = "Deny"
	GuardDenyAlways    = "DenyAlways"
	// AnnotationDeletionGuardMessage is the message a refused DELETE returns.
	AnnotationDeletionGuardMessage = "teardown.dev/deletion-guard-message"
	// AnnotationDeletedByRun is the operator's, on an object whose two-phase pipeline succeeded:
	// the name of the run that deletes it. It lifts that policy's veto, so that the operator's
	// own DELETE is let through whoever the operator runs as; the admission policy exempts no
	// identity. It names the run of this object (its UID is in the name), so a copy of the
	// annotation on another object, or on the object recreated, lifts nothing.
	AnnotationDeletedByRun = "teardown.dev/deleted-by-run"
)

// Labels a step puts on the objects it creates for a run (a job step's Jobs), so that their
// changes are routed to the run and they can be found by run.
const (
	// LabelRun is the run's name.
	LabelRun = "teardown.dev/run"
	// LabelRunNamespace is the run's namespace.
	LabelRunNamespace = "teardown.dev/run-namespace"
	// LabelRunUID is the run's UID; the operator caches only owned objects that carry it.
	LabelRunUID = "teardown.dev/run-uid"
	// LabelStep is the step's name.
	LabelStep = "teardown.dev/step"
	// LabelAttempt is the attempt that created the object.
	LabelAttempt = "teardown.dev/attempt"
)

// Condition types.
const (
	// ConditionReady is a policy's: valid, its target kind served, its targets protected.
	ConditionReady = "Ready"
	// ConditionComplete is True once a run's phase is final.
	ConditionComplete = "Complete"
	// ConditionVetoEnforced is a policy's with a deletion guard or trigger DeleteRequest: True
	// while the ValidatingAdmissionPolicy that refuses vetoed DELETEs (AdmissionPolicyName) and
	// its binding are installed; False while verdicts are published and nothing enforces them.
	ConditionVetoEnforced = "VetoEnforced"
	// ConditionProtectedFromCreation is a policy's: True while a MutatingAdmissionPolicy adds its
	// finalizer to the objects it selects when they are created, whether or not the operator
	// runs; False, with the reason, while objects are armed only once the operator sees them.
	ConditionProtectedFromCreation = "ProtectedFromCreation"
	// ConditionFailed is True on a run whose pipeline failed; it stays True if the run is then
	// abandoned, so the failure does not disappear from view.
	ConditionFailed = "Failed"
)

// Reasons of a policy's Ready condition.
const (
	ReasonProtecting    = "Protecting"
	ReasonSuspended     = "Suspended"
	ReasonInvalidSpec   = "InvalidSpec"
	ReasonKindNotServed = "TargetKindNotServed"
	ReasonInvalidTarget = "InvalidTarget"
	ReasonReleasing     = "ReleasingTargets"
)

// The admission policy that enforces deletion guards and two-phase vetoes, and the reasons of a
// policy's VetoEnforced condition.
const (
	// AdmissionPolicyName names the ValidatingAdmissionPolicy and its binding (config/admission).
	AdmissionPolicyName       = "teardown.dev-deletion-guard"
	ReasonAdmissionInstalled  = "AdmissionPolicyInstalled"
	ReasonAdmissionMissing    = "AdmissionPolicyMissing"
	ReasonAdmissionUnverified = "AdmissionPolicyUnverified"
	// ReasonAdmissionChanged: installed, but it fails open, its binding does not deny, or its
	// rules are not the ones shipped with the operator.
	ReasonAdmissionChanged = "AdmissionPolicyChanged"
)

// MarksPolicyName names the ValidatingAdmissionPolicy and binding (config/admission/marks.yaml)
// that admit setting, changing or removing the labels and annotations the operator trusts on
// objects (LabelRunUID, LabelDeletionGuard, AnnotationDeletionGuardMessage,
// AnnotationDeletedByRun) only from a user RBAC lets update teardownruns/status everywhere: the
// operator, or a cluster administrator.
const MarksPolicyName = "teardown.dev-marks"

// The admission policy that checks TeardownApprovals (config/admission/approvals.yaml): their
// approver is the identity that creates them, and that identity has the verb ApproveVerb on the
// run. The operator counts no approval while it is missing.
const (
	ApprovalPolicyName = "teardown.dev-approvals"
	// ApproveVerb is the RBAC verb on teardownruns that lets a person approve or reject a run's
	// approval step.
	ApproveVerb = "approve"
)

// The admission policy that checks requests (config/admission/requests.yaml): the annotations
// AnnotationDeleteRequested and AnnotationAbandon are admitted only from users RBAC lets delete the
// object, and every request's value must start with the user name of whoever sets it ("<user>:
// <why>"). The operator acts on no request while it is missing.
const RequestsPolicyName = "teardown.dev-requests"

// Reasons of a policy's ProtectedFromCreation condition.
const (
	// ReasonArmedAtAdmission: the policy's MutatingAdmissionPolicy and its binding are in place.
	ReasonArmedAtAdmission = "ArmedAtAdmission"
	// ReasonMatchNotAdmissible: spec.match cannot run at admission (a function or variable the
	// API server lacks), so no admission policy arms the targets.
	ReasonMatchNotAdmissible = "MatchNotAdmissible"
	// ReasonAdmissionUnavailable: the cluster does not serve admissionregistration.k8s.io/v1
	// MutatingAdmissionPolicy.
	ReasonAdmissionUnavailable = "AdmissionUnavailable"
	// ReasonAdmissionDisabled: the operator runs with --admission-arming=false.
	ReasonAdmissionDisabled = "AdmissionArmingDisabled"
	// ReasonArmingPending: the target kind's schema is too new for the API server to apply an
	// admission policy to it (see the message); the policy is armed at creation seconds later.
	ReasonArmingPending = "ArmingPolicyPending"
	// ReasonArmingRefused: the API server refused the admission policy; the message says why.
	ReasonArmingRefused = "ArmingPolicyRefused"
	// ReasonArmingBudget: the operator already keeps as many admission policies as its budget
	// allows, in all or in the policy's namespace; the message says which.
	ReasonArmingBudget = "ArmingBudgetExhausted"
	// ReasonNotProtecting: the policy is not Ready (invalid, suspended, its kind not served), so
	// nothing arms its targets.
	ReasonNotProtecting = "NotProtecting"
)

// Labels of the MutatingAdmissionPolicies and bindings that arm a policy's targets at creation,
// besides LabelPolicyKind, LabelPolicy and LabelPolicyNamespace.
const (
	// LabelManagedBy is Kubernetes' recommended label; the operator's admission objects carry it
	// with the value ManagedBy, which selects them all (drain, an operator run with arming off).
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "teardown-operator"
	// LabelPolicyUID is the UID of the policy they arm for: the admission objects of a policy
	// deleted and created again under the same name are recognised and updated.
	LabelPolicyUID = "teardown.dev/policy-uid"
)

// AnnotationPolicy, on a MutatingAdmissionPolicy and its binding that arm a policy's targets at
// creation, names that policy: <kind>/<namespace>/<name>, or <kind>/<name> for a
// ClusterTeardownPolicy.
const AnnotationPolicy = "teardown.dev/policy"

// The operator's leader election: the Lease the replica that acts holds and renews, in its
// --leader-election-namespace (by default its run namespace). Tools read it to tell whether an
// operator is running.
const (
	// LeaderElectionLease names the Lease.
	LeaderElectionLease = "teardown-operator.teardown.dev"
)

// Reasons of a run's Failed condition (besides ReasonStepFailed and ReasonPipelineTimedOut).
const (
	ReasonRejected        = "Rejected"
	ReasonInvalidPipeline = "InvalidPipeline"
	ReasonRunRetried      = "Retried"
)

// Event reasons, on runs and on their targets. Users alert on them.
const (
	ReasonRunCreated       = "TeardownStarted"
	ReasonStepStarted      = "StepStarted"
	ReasonStepSucceeded    = "StepSucceeded"
	ReasonStepFailed       = "StepFailed"
	ReasonStepRetrying     = "StepRetrying"
	ReasonStepSkipped      = "StepSkipped"
	ReasonSucceeded        = "TeardownSucceeded"
	ReasonFailed           = "TeardownFailed"
	ReasonAbandoned        = "TeardownAbandoned"
	ReasonPolicyInvalid    = "PolicyInvalid"
	ReasonPolicyGone       = "PolicyGone"
	ReasonPipelineTimedOut = "PipelineTimedOut"
	ReasonMatchFailed      = "MatchFailed"
	ReasonRetried          = "TeardownRetried"
	ReasonRetryRefused     = "RetryRefused"
	// ReasonDeleteRequested: a delete request started (or restarted) a DeleteRequest run.
	ReasonDeleteRequested = "DeleteRequested"
	// ReasonRequestIgnored: a request annotation (delete-requested, abandon) is not acted on, for
	// the admission policy RequestsPolicyName did not check it (missing, or set before it was in
	// force); the note says why.
	ReasonRequestIgnored = "RequestIgnored"
	// ReasonDeleteRequestBlocked: a delete request waits while a deletion guard holds.
	ReasonDeleteRequestBlocked = "DeleteRequestBlocked"
	// ReasonCancelled: a delete request was withdrawn and its run cancelled.
	ReasonCancelled = "TeardownCancelled"
	// ReasonDeleteFailed: the operator could not delete the object after its pipeline succeeded.
	ReasonDeleteFailed = "DeleteFailed"
	// ReasonRunStuck: a run crossed the operator's --stuck-after and its onStuck steps started.
	ReasonRunStuck = "TeardownStuck"
	// ReasonApprovalRecorded: an approval step counted an approval.
	ReasonApprovalRecorded = "ApprovalRecorded"
	// ReasonRejectionRecorded: an approval step counted a rejection, which fails its attempt.
	ReasonRejectionRecorded = "RejectionRecorded"
)
