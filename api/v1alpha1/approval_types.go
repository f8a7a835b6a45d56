package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ApprovalStep waits until people approve the rest of the pipeline, or one of them rejects it.
// Who may approve is Kubernetes RBAC's to say: the verb "approve" on the run (resource
// teardownruns of group teardown.dev) in the run's namespace. An approval is a TeardownApproval
// object (kubectl teardown approve and reject write it), whose approver the API server checks
// against the identity that creates it (ValidatingAdmissionPolicy teardown.dev-approvals).
type ApprovalStep struct {
	// message tells the approvers what they approve, with ${...} interpolation over `object`,
	// `steps` and `run`. Example: "backup ${steps.snapshot.outputs.id} of
	// ${object.metadata.name} is complete; approve the drop?". It is rendered when the step
	// starts and shown by kubectl teardown status and in the run's status.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`

	// required is how many distinct people must approve. Defaults to 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Required int32 `json:"required,omitempty"`

	// approvers, when set, narrows who counts: an approval or rejection counts only from one of
	// these users or a member of one of these groups (who must also have the RBAC verb). Unset,
	// anyone with the verb counts.
	// +optional
	Approvers *Approvers `json:"approvers,omitempty"`
}

// Approvers names the users and groups whose answers count.
// +kubebuilder:validation:XValidation:rule="has(self.users) || has(self.groups)",message="name at least one user or group"
type Approvers struct {
	// users are user names as the API server authenticates them, for example "alice@example.com"
	// or "system:serviceaccount:ops:release-bot".
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	Users []string `json:"users,omitempty"`

	// groups are group names as the API server authenticates them, for example "dba".
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	Groups []string `json:"groups,omitempty"`
}

// DefaultApprovalsRequired is how many approvals an approval step needs when it names none.
const DefaultApprovalsRequired = 1

// ApprovalDecision is an approver's answer.
// +kubebuilder:validation:Enum=Approve;Reject
type ApprovalDecision string

const (
	// Approve counts towards the step's required approvals.
	Approve ApprovalDecision = "Approve"
	// Reject fails the step's attempt: then its retry, onFailure and the policy's failurePolicy
	// apply as to any failed step.
	Reject ApprovalDecision = "Reject"
)

// Approver is the authenticated identity that approved or rejected.
type Approver struct {
	// username is the approver's user name as the API server authenticated it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Username string `json:"username"`

	// uid is the approver's user UID, when the authenticator gives one.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	UID string `json:"uid,omitempty"`

	// groups are the approver's groups as the API server authenticated them.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Groups []string `json:"groups,omitempty"`
}

// TeardownApprovalSpec is one person's answer to an approval step. It cannot change.
type TeardownApprovalSpec struct {
	// run is the name of the TeardownRun, in this namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Run string `json:"run"`

	// runUID is the run's UID: an answer to a run is not one to a later run of the same name.
	// +required
	RunUID types.UID `json:"runUID"`

	// step is the approval step's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Step string `json:"step"`

	// attempt is the step's attempt this answers (status.steps[].attempts): an attempt that
	// follows a rejection, or a retried run, asks again.
	// +required
	// +kubebuilder:validation:Minimum=1
	Attempt int32 `json:"attempt"`

	// decision is Approve or Reject.
	// +required
	Decision ApprovalDecision `json:"decision"`

	// reason says why, in words; it is recorded in the run and in events.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`

	// approver is who answers. It must be the identity that creates this object: the admission
	// policy teardown.dev-approvals refuses any other, and refuses an approver without the verb
	// "approve" on the run.
	// +required
	Approver Approver `json:"approver"`
}

// TeardownApproval is one person's approval or rejection of an approval step of a TeardownRun.
// kubectl teardown approve and reject create it; the API server admits it only from the approver
// it names and only if RBAC lets that approver "approve" the run. It is owned by its run and goes
// with it.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=tda,categories=teardown
// +kubebuilder:printcolumn:name="Run",type=string,JSONPath=`.spec.run`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.spec.step`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.spec.decision`
// +kubebuilder:printcolumn:name="Approver",type=string,JSONPath=`.spec.approver.username`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TeardownApproval struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: an answer cannot change; a later attempt asks again"
	Spec TeardownApprovalSpec `json:"spec"`
}

// TeardownApprovalList is a list of TeardownApproval.
// +kubebuilder:object:root=true
type TeardownApprovalList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TeardownApproval `json:"items"`
}

// ApprovalStatus is what an approval step asked, and the answers it counted.
type ApprovalStatus struct {
	// request is the step's message, as rendered when the step started.
	// +optional
	Request string `json:"request,omitempty"`
	// required is how many distinct approvers the step needs.
	Required int32 `json:"required"`
	// attempt is the step's attempt that asks now, and askedTime when it began to: answers to it
	// given before then do not count.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// +optional
	AskedTime *metav1.Time `json:"askedTime,omitempty"`
	// decisions are the answers counted, in the order they were given.
	// +optional
	// +listType=atomic
	Decisions []ApprovalRecord `json:"decisions,omitempty"`
	// ignored says of answers that did not count why not (not among the approvers, no RBAC verb).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Ignored []string `json:"ignored,omitempty"`
}

// ApprovalRecord is one answer, as recorded in the run.
type ApprovalRecord struct {
	// decision is Approve or Reject.
	Decision ApprovalDecision `json:"decision"`
	// approver is the identity that answered, as the API server authenticated it.
	Approver Approver `json:"approver"`
	// reason is the approver's, as given with the answer.
	Reason string `json:"reason"`
	// time is when the answer was given (the TeardownApproval's creation).
	Time metav1.Time `json:"time"`
	// attempt is the step's attempt it answered.
	Attempt int32 `json:"attempt"`
	// approval names the TeardownApproval.
	Approval string `json:"approval"`
}

// Approved counts the distinct approvers of attempt among the decisions.
func (s *ApprovalStatus) Approved(attempt int32) []string {
	var users []string
	for _, d := range s.Decisions {
		if d.Attempt == attempt && d.Decision == Approve && !slices.Contains(users, d.Approver.Username) {
			users = append(users, d.Approver.Username)
		}
	}
	return users
}
