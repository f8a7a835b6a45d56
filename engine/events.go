package engine

import (
	"context"
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	eventsclient "k8s.io/client-go/kubernetes/typed/events/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
)

// eventSink emits events on runs and targets. Targets in a terminating namespace get none: the
// API server refuses every create there, and trying would cost a request for each.
type eventSink struct {
	rec         recorder.EventRecorder
	once        *onceEvents
	terminating func(ctx context.Context, ns string) bool
	// stop sends what the sender still holds, for up to onceEventDrain, and stops it.
	stop func()
}

func newEventSink(rec recorder.EventRecorder, once *onceEvents, terminating func(context.Context, string) bool) *eventSink {
	return &eventSink{rec: rec, once: once, terminating: terminating}
}

// setupEvents makes the event sink: the events library's recorder for events that may repeat,
// and the sender of events that cannot, already sending. The sender is not one of the manager's
// runnables: the manager stops those before its reconcilers, which go on emitting as they finish
// their last passes. Engine.Shutdown stops it once the manager has stopped, as the manager stops
// its own event broadcaster last.
func setupEvents(mgr manager.Manager, terminating func(context.Context, string) bool) (*eventSink, error) {
	client, err := eventsclient.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("events client: %w", err)
	}
	once := newOnceEvents(client, "teardown-operator", ctrl.Log.WithName("events"))
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = once.Start(ctx)
	}()
	s := newEventSink(mgr.GetEventRecorder("teardown-operator"), once, terminating)
	s.stop = func() { stop(); <-stopped }
	return s, nil
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
// can never repeat (see onceEvents).
func (s *eventSink) emitFinal(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, ev pipeline.Event) {
	if obj == nil || s.terminating(ctx, key.Namespace) {
		return
	}
	typ, action := eventTypeAndAction(ev)
	s.once.send(objectRef(key, obj), nil, typ, ev.Reason, action, truncate(ev.Note, 1000))
}

// emitOnRun records ev on run and on its target (if known), related to the run. Both refer to the
// run as written by the pass that emits. When that pass wrote the run, no other pass can emit an
// event alike enough for the events library to fold into a series, so its cache of events kept
// to fold repeats would only cost memory, and they skip it (see onceEvents). A pass that wrote
// nothing (a refused retry, say, while the annotation's removal keeps failing) may come again
// with the same version: its events go through the library, which folds the repeats.
func (s *eventSink) emitOnRun(ctx context.Context, run *v1alpha1.TeardownRun, key TargetKey, target *metav1.PartialObjectMetadata, ev pipeline.Event, written bool) {
	if !written {
		s.emit(ctx, run, nil, run.Namespace, ev)
		if target != nil {
			s.emit(ctx, targetRef(key, target), run, key.Namespace, ev)
		}
		return
	}
	typ, action := eventTypeAndAction(ev)
	note := truncate(ev.Note, 1000)
	runRef := &corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TeardownRun",
		Namespace: run.Namespace, Name: run.Name, UID: run.UID, ResourceVersion: run.ResourceVersion}
	if !s.terminating(ctx, run.Namespace) {
		s.once.send(runRef, nil, typ, ev.Reason, action, note)
	}
	if target != nil && !s.terminating(ctx, key.Namespace) {
		s.once.send(objectRef(key, target), runRef, typ, ev.Reason, action, note)
	}
}

// objectRef refers to the target obj of key, as the events library would.
func objectRef(key TargetKey, obj *metav1.PartialObjectMetadata) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: key.GVK().GroupVersion().String(), Kind: key.GVK().Kind,
		Namespace: key.Namespace, Name: key.Name, UID: obj.UID, ResourceVersion: obj.ResourceVersion}
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
