// Package approval implements the approval step: the pipeline waits until enough people approve
// or one of them rejects. An answer is a TeardownApproval object; the API server admits one only
// from the identity it names and only if RBAC lets that identity "approve" the run (the admission
// policy teardown.dev-approvals), and the step asks RBAC again (a SubjectAccessReview) before it
// counts it. The step records each answer it counts in the run's status before the pipeline goes
// on, so a crash neither asks again (the answer is an object) nor loses the record.
package approval

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// The operator asks RBAC about approvers, and reads the answers (cached) and the admission policy
// that checks them (engine/rbac.go grants reading admission policies).
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=teardown.dev,resources=teardownapprovals,verbs=get;list;watch

// OutputApprovedBy is the output listing who approved, for later steps (and notifications):
// steps.<name>.outputs.approvedBy.
const OutputApprovedBy = "approvedBy"

// Intervals of a waiting step. A new answer wakes the run at once (the engine watches
// TeardownApprovals); the interval only bounds how late a change nothing announces is seen (the
// admission policy installed again).
const (
	// CheckInterval is how often a step waiting for answers looks again.
	CheckInterval = time.Minute
	// ErrorInterval is how soon a step that could not read or check the answers tries again.
	ErrorInterval = 5 * time.Second
)

// Kind is the approval step kind.
type Kind struct {
	ledger Ledger
}

// New returns the approval kind, reading and checking answers through ledger.
func New(ledger Ledger) *Kind { return &Kind{ledger: ledger} }

// Name implements steps.Kind.
func (*Kind) Name() string { return "approval" }

// Configured implements steps.Kind.
func (*Kind) Configured(s *v1alpha1.Step) bool { return s.Approval != nil }

// BindsRun implements steps.RunBinder: answers name the run by name and UID, so it must be
// recorded before the step asks.
func (*Kind) BindsRun() bool { return true }

// Checkpoints implements steps.Checkpointer: who approved is on record before anything the
// approval allowed starts.
func (*Kind) Checkpoints() bool { return true }

// Outputs implements steps.OutputDeclarer.
func (*Kind) Outputs(*v1alpha1.Step) []string { return []string{OutputApprovedBy} }

// Owns implements steps.Owner: a TeardownApproval labelled with its run wakes the run.
func (*Kind) Owns() []client.Object { return []client.Object{&v1alpha1.TeardownApproval{}} }

// ReleaseRun implements steps.Owner. Answers are owned by their run (kubectl teardown approve
// sets the owner reference) and go with it; they are the record of who approved, so nothing is
// deleted before.
func (*Kind) ReleaseRun(context.Context, *v1alpha1.TeardownRun) error { return nil }

type action struct {
	ledger    Ledger
	step      string
	message   *expr.Template
	required  int32
	approvers *v1alpha1.Approvers
}

// Compile implements steps.Kind.
func (k *Kind) Compile(cc steps.CompileContext, s *v1alpha1.Step, path *field.Path) (steps.Action, field.ErrorList) {
	ap := s.Approval
	p := path.Child("approval")
	var errs field.ErrorList
	a := &action{ledger: k.ledger, step: s.Name, required: ap.Required, approvers: ap.Approvers}
	if a.required == 0 {
		a.required = v1alpha1.DefaultApprovalsRequired
	}
	if a.required < 0 {
		errs = append(errs, field.Invalid(p.Child("required"), ap.Required, "must be at least 1"))
	}
	if ap.Message != "" {
		t, err := cc.Env.CompileTemplate(ap.Message)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("message"), ap.Message, err.Error()))
		}
		a.message = t
	}
	switch who := ap.Approvers; {
	case who == nil:
	case len(who.Users)+len(who.Groups) == 0:
		errs = append(errs, field.Required(p.Child("approvers"), "name at least one user or group, or leave approvers out"))
	case len(who.Groups) == 0 && int(a.required) > len(who.Users):
		errs = append(errs, field.Invalid(p.Child("required"), a.required,
			fmt.Sprintf("%d distinct approvals can never come from the %d users named and no group: name more users, a group, or require fewer", a.required, len(who.Users))))
	}
	return a, errs
}
