package engine

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// AuditMessage is the message of the line logged once for every teardown that ends, whether or
// not a TeardownRun records it: the audit trail to ship to a log store. The operator's logger
// never samples it (cmd/teardown-operator).
const AuditMessage = "teardown ended"

// passReports are what a written pass reports beside the run: its metric observations, and the
// end of a teardown to its policy's history.
type passReports struct {
	metrics *metrics
	history *teardownHistory
}

// observe makes a written pass's metric observations.
func (r passReports) observe(run *v1alpha1.TeardownRun, obs []pipeline.Observation) {
	label := policy.KeyOf(run.Spec.PolicyRef).String()
	for _, o := range obs {
		switch o.Metric {
		case pipeline.StepFailure:
			r.metrics.stepFailures.WithLabelValues(label, o.Step).Inc()
		case pipeline.StepDuration:
			r.metrics.stepDuration.WithLabelValues(label, o.Step, o.Phase).Observe(time.Since(o.Since).Seconds())
		case pipeline.PipelineDuration:
			r.metrics.pipelineDuration.WithLabelValues(label, o.Phase).Observe(time.Since(o.Since).Seconds())
		}
	}
}

// ended reports a teardown that the pass ended to its policy's history; not a run the operator
// does not trust (rejected: made by hand), which is no teardown of the policy's.
func (r passReports) ended(before, after *v1alpha1.TeardownRun, recorded, rejected bool) {
	if !endsNow(before, after) || rejected {
		return
	}
	end := time.Now()
	if after.Status.CompletionTime != nil {
		end = after.Status.CompletionTime.Time
	}
	ref := after.Spec.PolicyRef
	r.history.ended(policy.KeyOf(ref), ref.UID, v1alpha1.RecentTeardown{Target: after.Spec.Target, Outcome: after.Status.Phase,
		CompletionTime: metav1.NewTime(end), Run: recordName(after, recorded), Message: after.Status.Message})
}

// endsNow reports whether a pass took a run to an end: from in flight, from another end (a failed
// run abandoned), or through a retry that ended again in the same pass.
func endsNow(before, after *v1alpha1.TeardownRun) bool {
	was, is := before.Status.Phase, after.Status.Phase
	return is.Finished() && (!was.Finished() || is != was || after.Status.Retries > before.Status.Retries)
}

// recordName names the run that records a teardown, or "" when none is kept.
func recordName(run *v1alpha1.TeardownRun, recorded bool) string {
	if !recorded {
		return ""
	}
	return run.Namespace + "/" + run.Name
}

// stepOutcome is one step of a teardown that ended, as its audit line reports it.
type stepOutcome struct {
	Name     string `json:"name"`
	Phase    string `json:"phase"`
	Attempts int32  `json:"attempts,omitempty"`
	Took     string `json:"took,omitempty"`
}

func stepOutcomes(run *v1alpha1.TeardownRun) []stepOutcome {
	out := make([]stepOutcome, 0, len(run.Status.Steps))
	for _, ss := range run.Status.AllSteps() {
		o := stepOutcome{Name: ss.Name, Phase: string(ss.Phase), Attempts: ss.Attempts}
		if ss.StartTime != nil && ss.CompletionTime != nil {
			o.Took = ss.CompletionTime.Sub(ss.StartTime.Time).String()
		}
		out = append(out, o)
	}
	return out
}

// logTransitions logs, at the default level, what a written pass changed that an operator reading
// the logs needs: a run starting, retried or ending, and each failed step attempt. Everything
// else is in the run's status and events. The end of a teardown is the audit line (AuditMessage).
func logTransitions(ctx context.Context, before, after *v1alpha1.TeardownRun, recorded bool) {
	log := ctrl.LoggerFrom(ctx).WithValues("policy", after.Spec.PolicyRef.Kind+"/"+policyName(after.Spec.PolicyRef),
		"target", targetName(after.Spec.Target))
	was, is := before.Status.Phase, after.Status.Phase
	// A teardown that starts and ends in one pass logs its end alone: the audit line says it all.
	if (was == "" || was == v1alpha1.RunPending) && is != was && !is.Finished() {
		log.Info("teardown started", "steps", len(after.Spec.Pipeline.Steps))
	}
	// By the count, not the phase: a retried run may run to its end in the same pass.
	if after.Status.Retries > before.Status.Retries {
		log.Info("teardown retried", "fromStep", after.Status.LastRetry.FromStep, "retries", after.Status.Retries)
	}
	for _, ss := range after.Status.AllSteps() {
		old := before.Status.Step(ss.Name)
		switch {
		case ss.Phase == v1alpha1.StepFailed && (old == nil || old.Phase != v1alpha1.StepFailed):
			log.Info("step failed", "step", ss.Name, "attempts", ss.Attempts, "message", ss.Message)
		case ss.RetryTime != nil && (old == nil || old.RetryTime == nil || !old.RetryTime.Equal(ss.RetryTime)):
			log.Info("step attempt failed; retrying", "step", ss.Name, "attempt", ss.Attempts, "message", ss.Message)
		}
	}
	if endsNow(before, after) {
		var took time.Duration
		if st, end := after.Status.StartTime, after.Status.CompletionTime; st != nil && end != nil {
			took = end.Sub(st.Time)
		}
		t := after.Spec.Target
		log.Info(AuditMessage, "phase", is, "message", after.Status.Message, "took", took.String(),
			"targetAPIVersion", t.APIVersion, "targetUID", t.UID, "run", recordName(after, recorded), "steps", stepOutcomes(after))
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
