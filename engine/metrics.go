package engine

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// metrics are served on the manager's metrics endpoint.
type metrics struct {
	pipelineDuration *prometheus.HistogramVec
	stepDuration     *prometheus.HistogramVec
	stepFailures     *prometheus.CounterVec
	activeRuns       *prometheus.GaugeVec
	stuckRuns        *prometheus.GaugeVec
	protected        *prometheus.GaugeVec
	matchErrors      *prometheus.GaugeVec
	unarmed          *prometheus.GaugeVec
	armedLate        *prometheus.CounterVec
}

var (
	registered *metrics
	// Buckets from 10ms to about 3h: pipelines range from instant waits to long snapshots.
	durationBuckets = prometheus.ExponentialBuckets(0.01, 3, 14)
)

func newMetrics() *metrics {
	if registered != nil { // the registry is process-wide; tests build several engines
		return registered
	}
	m := &metrics{
		pipelineDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "teardown_pipeline_duration_seconds", Help: "Time from a run's start to its end, by policy and final phase.", Buckets: durationBuckets,
		}, []string{"policy", "phase"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "teardown_step_duration_seconds", Help: "Time from a step's start to its end, by policy, step and final phase.", Buckets: durationBuckets,
		}, []string{"policy", "step", "phase"}),
		stepFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "teardown_step_failures_total", Help: "Failed step attempts, by policy and step.",
		}, []string{"policy", "step"}),
		activeRuns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "teardown_runs_active", Help: "Runs in progress, by policy.",
		}, []string{"policy"}),
		stuckRuns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "teardown_runs_stuck", Help: "Runs unfinished (or failed and retaining their target) for longer than the stuck threshold, by policy.",
		}, []string{"policy"}),
		protected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "teardown_protected_objects", Help: "Objects carrying a policy's finalizer, by policy.",
		}, []string{"policy"}),
		matchErrors: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "teardown_match_errors", Help: "Objects whose policy match fails to evaluate (left as they are), by policy.",
		}, []string{"policy"}),
		unarmed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "teardown_unarmed_objects", Help: "Objects a policy selects that do not carry its finalizer yet (not being deleted; its match not false), by policy: the window in which a deletion would skip the teardown.",
		}, []string{"policy"}),
		armedLate: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "teardown_objects_armed_by_operator_total", Help: "Finalizers the operator added to existing objects rather than an admission policy at their creation, by policy.",
		}, []string{"policy"}),
	}
	ctrlmetrics.Registry.MustRegister(m.pipelineDuration, m.stepDuration, m.stepFailures, m.activeRuns, m.stuckRuns, m.protected, m.matchErrors,
		m.unarmed, m.armedLate)
	registered = m
	return m
}

// forget drops a deleted policy's gauges.
func (m *metrics) forget(policy string) {
	m.activeRuns.DeleteLabelValues(policy)
	m.stuckRuns.DeleteLabelValues(policy)
	m.protected.DeleteLabelValues(policy)
	m.matchErrors.DeleteLabelValues(policy)
	m.unarmed.DeleteLabelValues(policy)
	m.armedLate.DeleteLabelValues(policy)
	by := prometheus.Labels{"policy": policy}
	m.pipelineDuration.DeletePartialMatch(by)
	m.stepDuration.DeletePartialMatch(by)
	m.stepFailures.DeletePartialMatch(by)
}
