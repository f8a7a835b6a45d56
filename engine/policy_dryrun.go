package engine

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/steps"
)

// maxDryRuns bounds the policies whose dry-run verdict is remembered; past it the memory starts
// over (a verdict costs one dry-run create per job step to find again).
const maxDryRuns = 4096

// dryRuns asks the API server, once per policy generation, whether it accepts what the policy's
// steps would create (steps.ServerChecker: a job step's Job), so that a template the API server
// refuses makes the policy not Ready when it is applied, rather than failing a teardown and
// keeping the object. It is shared by the policy reconcilers and safe for concurrent use.
type dryRuns struct {
	runNamespace string

	mu       sync.Mutex
	verdicts map[policy.Key]dryRunVerdict
}

// dryRunVerdict is what the API server refused in one generation of a policy.
type dryRunVerdict struct {
	uid        types.UID
	generation int64
	refused    field.ErrorList
}

func newDryRuns(runNamespace string) *dryRuns {
	return &dryRuns{runNamespace: runNamespace, verdicts: map[policy.Key]dryRunVerdict{}}
}

// refusals returns what the API server refuses in the objects c's steps would create: asked
// once for each generation of the policy, then remembered. What kept the API server from
// answering (an error, no permission, a namespace missing or going) is logged and refuses
// nothing: the step meets it, if it lasts, when it runs.
func (d *dryRuns) refusals(ctx context.Context, c *policy.Compiled) field.ErrorList {
	if d == nil || c == nil || c.Pipeline == nil {
		return nil
	}
	d.mu.Lock()
	v, ok := d.verdicts[c.Key]
	d.mu.Unlock()
	if ok && v.uid == c.UID && v.generation == c.Generation {
		return v.refused
	}
	v = dryRunVerdict{uid: c.UID, generation: c.Generation}
	for _, s := range c.Pipeline.All() {
		chk, ok := s.Action.(steps.ServerChecker)
		if !ok {
			continue
		}
		refused, err := chk.CheckWithServer(ctx, d.runNamespace)
		if err != nil {
			logf.FromContext(ctx).Info("cannot ask the API server whether it accepts what a step creates; the step will find out when it runs",
				"policy", c.Key.String(), "step", s.Spec.Name, "error", err.Error())
			if ctx.Err() != nil {
				return nil // stopping: ask again next time
			}
			continue
		}
		v.refused = append(v.refused, refused...)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.verdicts) >= maxDryRuns {
		d.verdicts = map[policy.Key]dryRunVerdict{}
	}
	d.verdicts[c.Key] = v
	return v.refused
}
