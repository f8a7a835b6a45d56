package jobstep

import (
	"context"
	"fmt"

	"github.com/teardown-dev/teardown-operator/steps"
)

// Plan implements steps.Planner: the Job the step's next attempt would create, rendered and not
// created.
func (a *action) Plan(ctx context.Context, in *steps.Input) steps.Plan {
	job, err := a.build(ctx, in)
	if err != nil {
		return steps.Plan{Summary: "create a Job (not rendered)", Err: err.Error()}
	}
	summary := fmt.Sprintf("create Job %s/%s and wait for it to complete", job.Namespace, job.Name)
	if a.success != nil {
		summary = fmt.Sprintf("create Job %s/%s and wait until successCondition holds: %s", job.Namespace, job.Name, a.success)
	}
	return steps.Plan{Summary: summary, Rendered: job}
}
