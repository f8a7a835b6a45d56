package engine

import (
	"context"
	"unicode/utf8"

	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

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
func (s *eventSink) emit(ctx context.Context, regarding, related runtime.Object, ns string, ev pipeline.Event) {
	if regarding == nil || s.terminating(ctx, ns) {
		return
	}
	typ := corev1.EventTypeNormal
	if ev.Warning {
		typ = corev1.EventTypeWarning
	}
	action := ev.Action
	if action == "" {
		action = ev.Reason
	}
	s.rec.Eventf(regarding, related, typ, ev.Reason, action, "%s", truncate(ev.Note, 1000))
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
