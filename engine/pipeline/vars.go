package pipeline

import (
	"encoding/json"
	"time"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Input is what a step's action sees of run at now: for the engine's calls outside a pass
// (steps.Releaser after the status write).
func Input(run *v1alpha1.TeardownRun, ss *v1alpha1.StepStatus, now time.Time) *steps.Input {
	return &steps.Input{Run: run, Status: ss.DeepCopy(), Vars: varsOf(run, decodeObject(run), ss), PolicyNamespace: policyNamespace(run), Now: now}
}

// policyNamespace is a TeardownPolicy's namespace, empty for a ClusterTeardownPolicy.
func policyNamespace(run *v1alpha1.TeardownRun) string {
	if run.Spec.PolicyRef.Kind != policy.KindNamespaced {
		return ""
	}
	return run.Spec.PolicyRef.Namespace
}

// decodeObject decodes the run's snapshot of its object.
func decodeObject(run *v1alpha1.TeardownRun) map[string]any {
	obj := map[string]any{}
	if len(run.Spec.Object.Raw) > 0 {
		_ = json.Unmarshal(run.Spec.Object.Raw, &obj)
	}
	return obj
}

// varsOf binds object, steps and run for one step's expressions.
func varsOf(run *v1alpha1.TeardownRun, object map[string]any, ss *v1alpha1.StepStatus) expr.Vars {
	stepsVar := make(map[string]any, len(run.Status.Steps)+len(run.Status.Finally))
	for _, s := range run.Status.AllSteps() {
		outputs := make(map[string]any, len(s.Outputs))
		for k, v := range s.Outputs {
			var x any
			if json.Unmarshal(v.Raw, &x) == nil {
				outputs[k] = x
			}
		}
		stepsVar[s.Name] = map[string]any{"phase": string(s.Phase), "outputs": outputs, "message": s.Message}
	}
	// A finally step reads how the pipeline ended; a step, that the run is running.
	phase, message := run.Status.Phase, run.Status.Message
	if e := run.Status.Ending; e != nil {
		phase, message = e.Phase, e.Message
	}
	return expr.Vars{
		expr.VarObject: object,
		expr.VarSteps:  stepsVar,
		expr.VarRun: map[string]any{
			"name": run.Name, "namespace": run.Namespace, "uid": string(run.UID),
			"attempt": int64(ss.Attempts), "step": ss.Name, "phase": string(phase), "message": message,
		},
	}
}
