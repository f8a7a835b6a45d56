package engine

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	eventsclient "k8s.io/client-go/kubernetes/typed/events/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// eventSink emits events on runs and targets. Targets in a terminating namespace get none: the
// API server refuses every create there, and trying would cost a request for each.
type eventSink struct {
	rec         recorder.EventRecorder
	final       *finalEvents
	terminating func(ctx context.Context, ns string) bool
}

func newEventSink(rec recorder.EventRecorder, final *finalEvents, terminating func(context.Context, string) bool) *eventSink {
	return &eventSink{rec: rec, final: final, terminating: terminating}
}

// setupEvents makes the event sink: the events library's recorder for events that may repeat,
// and the final-event sender (a manager runnable) for the last event of an object.
func setupEvents(mgr manager.Manager, terminating func(context.Context, string) bool) (*eventSink, error) {
	client, err := eventsclient.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("events client: %w", err)
	}
	final := newFinalEvents(client, "teardown-operator", ctrl.Log.WithName("events"))
	if err := mgr.Add(final); err != nil {
		return nil, err
	}
	return newEventSink(mgr.GetEventRecorder("teardown-operator"), final, terminating), nil
}

// emit records ev on regarding (and its related object, if any).
func (s *eventSink) emit(ctx context.Context, regarding, related runtime.Object, ns string, ev pipeline.Event) {
	if regarding == nil || s.terminating(ctx, ns) {
		return
	}
	typ, action := eventTypeAndAction(ev)
	s.rec.Eventf(regarding, related, typ, ev.Reason, action, "%s", truncate(ev.Note, 1000))
}

// emitFinal records ev on an object whose teardown ends with it: the object goes, so the event
// can never repeat (see finalEvents).
func (s *eventSink) emitFinal(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, ev pipeline.Event) {
	if obj == nil || s.terminating(ctx, key.Namespace) {
		return
	}
	typ, action := eventTypeAndAction(ev)
	ref := &corev1.ObjectReference{APIVersion: key.GVK().GroupVersion().String(), Kind: key.GVK().Kind,
		Namespace: key.Namespace, Name: key.Name, UID: obj.UID, ResourceVersion: obj.ResourceVersion}
	s.final.send(ref, typ, ev.Reason, action, truncate(ev.Note, 1000))
}

func eventTypeAndAction(ev pipeline.Event) (typ, action string) {
	typ, action = corev1.EventTypeNormal, ev.Action
	if ev.Warning {
		typ = corev1.EventTypeWarning
	}
	if action == "" {
		action = ev.Reason
	}
	return typ, action
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
