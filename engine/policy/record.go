package policy

import (
	"encoding/json"
	"regexp"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// needsRun reports whether step cannot start before its run is recorded: its kind needs the run
// (steps.RunBinder), or its expressions may read run.uid, which only a recorded run has.
func needsRun(kind steps.Kind, step *v1alpha1.Step) bool {
	if b, ok := kind.(steps.RunBinder); ok && b.BindsRun() {
		return true
	}
	return readsRunUID(step)
}

// runRef finds the variable run and the field read of it, if any.
var runRef = regexp.MustCompile(`\brun\b(\s*\.\s*([A-Za-z_]\w*))?`)

// readsRunUID reports whether any of step's fields may read run.uid. It looks at the text, not
// the expressions: a word "run" anywhere but before .name, .namespace, .attempt, .step, .phase
// or .message counts, so it may be wrong only on the safe side (the step then waits for its run
// to be recorded). The phase and message are the pipeline's, known before any record (a finally
// step's when: run.phase != 'Succeeded' skips at once, and a clean success leaves no run).
func readsRunUID(step *v1alpha1.Step) bool {
	named := *step
	named.Name = "" // a step named run-export reads nothing
	raw, err := json.Marshal(&named)
	if err != nil {
		return true
	}
	for _, m := range runRef.FindAllSubmatch(raw, -1) {
		switch string(m[2]) {
		case "name", "namespace", "attempt", "step", "phase", "message":
		default:
			return true
		}
	}
	return false
}

// RecordsEveryRun reports whether every deletion leaves a TeardownRun (spec.runHistory All, or
// its earlier name Always), rather than only those that do not succeed at once (the default,
// SkipImmediateSuccess). A two-phase run is always recorded: the deletion it makes must find it,
// or the pipeline would run again.
func (c *Compiled) RecordsEveryRun() bool {
	return c.Spec == nil || c.Spec.RunHistory.RecordsAll() || c.TwoPhase()
}

// ReadsTargetFirst reports whether a deletion's first pass starts from the whole object, read
// from the API server: it is a two-phase request (its delete request is read from the object), or
// an expression of its pipeline reads more of `object` than the metadata the engine caches.
func (c *Compiled) ReadsTargetFirst() bool {
	return c.Spec == nil || c.TwoPhase() || c.Pipeline == nil || c.Pipeline.ReadsObjectBeyondMetadata
}

// TwoPhase reports whether the policy runs its pipeline on a delete request, before the DELETE
// (spec.trigger DeleteRequest).
func (c *Compiled) TwoPhase() bool {
	return c.Spec != nil && c.Spec.Trigger == v1alpha1.TriggerDeleteRequest
}
