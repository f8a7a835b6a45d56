package engine

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// logTransitions logs, at the default level, what a written pass changed that an operator reading
// the logs needs: a run starting, retried or ending, and each failed step attempt. Everything
// else is in the run's status and events.
func logTransitions(ctx context.Context, before, after *v1alpha1.TeardownRun) {
	log := ctrl.LoggerFrom(ctx).WithValues("policy", after.Spec.PolicyRef.Kind+"/"+policyName(after.Spec.PolicyRef),
		"target", targetName(after.Spec.Target))
	was, is := before.Status.Phase, after.Status.Phase
	if (was == "" || was == v1alpha1.RunPending) && is != was {
		log.Info("teardown started", "steps", len(after.Spec.Pipeline.Steps))
	}
	// By the count, not the phase: a retried run may run to its end in the same pass.
	if after.Status.Retries > before.Status.Retries {
		log.Info("teardown retried", "fromStep", after.Status.LastRetry.FromStep, "retries", after.Status.Retries)
	}
	for i := range after.Status.Steps {
		ss := &after.Status.Steps[i]
		old := before.Status.Step(ss.Name)
		switch {
		case ss.Phase == v1alpha1.StepFailed && (old == nil || old.Phase != v1alpha1.StepFailed):
			log.Info("step failed", "step", ss.Name, "attempts", ss.Attempts, "message", ss.Message)
		case ss.RetryTime != nil && (old == nil || old.RetryTime == nil || !old.RetryTime.Equal(ss.RetryTime)):
			log.Info("step attempt failed; retrying", "step", ss.Name, "attempt", ss.Attempts, "message", ss.Message)
		}
	}
	if is.Finished() && !was.Finished() || is.Finished() && was.Finished() && is != was {
		var took time.Duration
		if st, end := after.Status.StartTime, after.Status.CompletionTime; st != nil && end != nil {
			took = end.Sub(st.Time)
		}
		log.Info("teardown ended", "phase", is, "message", after.Status.Message, "took", took.String())
	}
}

func policyName(ref v1alpha1.PolicyReference) string {
	if ref.Namespace == "" {
		return ref.Name
	}
	return ref.Namespace + "/" + ref.Name
}

func targetName(t v1alpha1.TargetObjectReference) string {
	if t.Namespace == "" {
		return t.Kind + " " + t.Name
	}
	return t.Kind + " " + t.Namespace + "/" + t.Name
}
