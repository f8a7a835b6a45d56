package approval

import (
	"context"
	"fmt"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Request is an approval step's plan: what it would ask, of whom.
type Request struct {
	Message   string              `json:"message,omitempty"`
	Required  int32               `json:"required"`
	Approvers *v1alpha1.Approvers `json:"approvers,omitempty"`
	// Verb is the RBAC check an approver must pass.
	Verb string `json:"rbac"`
}

// Plan implements steps.Planner: the message rendered now, and who may answer.
func (a *action) Plan(ctx context.Context, in *steps.Input) steps.Plan {
	req := Request{Required: a.required, Approvers: a.approvers,
		Verb: fmt.Sprintf("%s teardownruns.%s in the run's namespace", v1alpha1.ApproveVerb, v1alpha1.Group)}
	summary := fmt.Sprintf("wait for %d approval(s)", a.required)
	if a.approvers != nil {
		summary += " from " + a.who()
	}
	plan := steps.Plan{Summary: summary, Rendered: &req}
	if a.message != nil {
		msg, err := a.message.Render(ctx, in.Vars)
		if err != nil {
			plan.Err = fmt.Sprintf("approval.message: %v", err)
		}
		req.Message = msg
	}
	return plan
}
