package approval

import (
	"context"
	"testing"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// A plan renders the message now and says who may answer, reading nothing else.
func TestPlan(t *testing.T) {
	l := &ledger{}
	a := compile(t, l, v1alpha1.ApprovalStep{Message: "drop ${object.metadata.name}?", Required: 2,
		Approvers: &v1alpha1.Approvers{Groups: []string{"dba"}}})
	plan := a.(steps.Planner).Plan(context.Background(), input(nil))
	req := plan.Rendered.(*Request)
	if plan.Summary != "wait for 2 approval(s) from groups dba" || req.Message != "drop orders?" || plan.Err != "" || l.reviews != 0 {
		t.Errorf("plan %q %+v %q (%d reviews)", plan.Summary, req, plan.Err, l.reviews)
	}
}
