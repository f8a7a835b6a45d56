package engine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// Event reasons. They are part of the API: users alert on them.
const (
	ReasonRunCreated       = "TeardownStarted"
	ReasonStepStarted      = "StepStarted"
	ReasonStepSucceeded    = "StepSucceeded"
	ReasonStepFailed       = "StepFailed"
	ReasonStepRetrying     = "StepRetrying"
	ReasonStepSkipped      = "StepSkipped"
	ReasonSucceeded        = "TeardownSucceeded"
	ReasonFailed           = "TeardownFailed"
	ReasonAbandoned        = "TeardownAbandoned"
	ReasonPolicyInvalid    = "PolicyInvalid"
	ReasonPolicyGone       = "PolicyGone"
	ReasonPipelineTimedOut = "PipelineTimedOut"
	ReasonMatchFailed      = "MatchFailed"
	ReasonRetried          = "TeardownRetried"
	ReasonRetryRefused     = "RetryRefused"
)

// runEvent is one event to emit about a run, and about its target.
type runEvent struct {
	warning bool
	reason  string
	// action names what the event is about: the step, for step events. The events recorder folds
	// events with the same object, reason and action into one series that keeps the first note,
	// so without it two steps succeeding in one pass would show as one.
	action string
	note   string
}

// eventSink emits events on runs and targets. Targets in a terminating namespace get none: the
// API server refuses every create there, and trying would cost a request for each.
type eventSink struct {
	rec         recorder.EventRecorder
	terminating func(ctx context.Context, ns string) bool
}

func newEventSink(rec recorder.EventRecorder, terminating func(context.Context, string) bool) *eventSink {
	return &eventSink{rec: rec, terminating: terminating}
}

// emit records ev on regarding (and its related object, if any).
func (s *eventSink) emit(ctx context.Context, regarding, related runtime.Object, ns string, ev runEvent) {
	if regarding == nil || s.terminating(ctx, ns) {
		return
	}
	typ := corev1.EventTypeNormal
	if ev.warning {
		typ = corev1.EventTypeWarning
	}
	action := ev.action
	if action == "" {
		action = ev.reason
	}
	s.rec.Eventf(regarding, related, typ, ev.reason, action, "%s", truncate(ev.note, 1000))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func eventf(warning bool, reason, format string, args ...any) runEvent {
	return runEvent{warning: warning, reason: reason, note: fmt.Sprintf(format, args...)}
}
