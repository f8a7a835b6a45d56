// Package eventsink emits the engine's events: on runs, on the objects they tear down and on
// policies. Events that may repeat go through client-go's events library, which folds repeats
// into a series; events that cannot repeat (each names a run as one pass wrote it, or is an
// object's last) are sent by a small sender of its own that keeps no copy of them (sender.go).
// Objects in a namespace being deleted get none: the API server refuses every create there.
package eventsink

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

// Sink emits events on runs, targets and policies. Targets in a terminating namespace get none:
// the API server refuses every create there, and trying would cost a request for each.
type Sink struct {
	rec         recorder.EventRecorder
	once        *sender
	terminating func(ctx context.Context, ns string) bool
	// stop sends what the sender still holds, for up to senderDrain, and stops it.
	stop func()
}

func newSink(rec recorder.EventRecorder, once *sender, terminating func(context.Context, string) bool) *Sink {
	return &Sink{rec: rec, once: once, terminating: terminating}
}

// Setup makes the sink: the events library's recorder for events that may repeat, and the sender
// of events that cannot, already sending. terminating says whether a namespace is being deleted.
// The sender is not one of the manager's runnables: the manager stops those before its
// reconcilers, which go on emitting as they finish their last passes. Shutdown stops it once the
// manager has stopped, as the manager stops its own event broadcaster last.
func Setup(mgr manager.Manager, terminating func(context.Context, string) bool) (*Sink, error) {
	client, err := eventsclient.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("events client: %w", err)
	}
	once := newSender(client, "teardown-operator", ctrl.Log.WithName("events"))
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = once.Start(ctx)
	}()
	s := newSink(mgr.GetEventRecorder("teardown-operator"), once, terminating)
	s.stop = func() { stop(); <-stopped }
	return s, nil
}

// Shutdown sends the events the sink still holds, for up to 5 s, and stops sending.
func (s *Sink) Shutdown() {
	if s.stop != nil {
		s.stop()
	}
}

// Emit records ev on regarding (and its related object, if any), in namespace ns.
func (s *Sink) Emit(ctx context.Context, regarding, related runtime.Object, ns string, ev pipeline.Event) {
	if regarding == nil || s.terminating(ctx, ns) {
		return
	}
	typ, action := eventTypeAndAction(ev)
	s.rec.Eventf(regarding, related, typ, ev.Reason, action, "%s", Truncate(ev.Note, maxNote))
}

// EmitFinal records ev on an object whose teardown ends with it: the object goes, so the event
// can never repeat (see sender).
func (s *Sink) EmitFinal(ctx context.Context, target *corev1.ObjectReference, ev pipeline.Event) {
	if target == nil || s.terminating(ctx, target.Namespace) {
		return
	}
	typ, action := eventTypeAndAction(ev)
	s.once.send(target, nil, typ, ev.Reason, action, Truncate(ev.Note, maxNote))
}

// EmitOnRun records ev on run and on its target (if known), related to the run. Both refer to the
// run as written by the pass that emits. When that pass wrote the run, no other pass can emit an
// event alike enough for the events library to fold into a series, so its cache of events kept
// to fold repeats would only cost memory, and they skip it (see sender). A pass that wrote
// nothing (a refused retry, say, while the annotation's removal keeps failing) may come again
// with the same version: its events go through the library, which folds the repeats.
func (s *Sink) EmitOnRun(ctx context.Context, run *v1alpha1.TeardownRun, target *corev1.ObjectReference, ev pipeline.Event, written bool) {
	if !written {
		s.Emit(ctx, run, nil, run.Namespace, ev)
		if target != nil {
			s.Emit(ctx, objectOf(target), run, target.Namespace, ev)
		}
		return
	}
	typ, action := eventTypeAndAction(ev)
	note := Truncate(ev.Note, maxNote)
	runRef := &corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TeardownRun",
		Namespace: run.Namespace, Name: run.Name, UID: run.UID, ResourceVersion: run.ResourceVersion}
	if !s.terminating(ctx, run.Namespace) {
		s.once.send(runRef, nil, typ, ev.Reason, action, note)
	}
	if target != nil && !s.terminating(ctx, target.Namespace) {
		s.once.send(target, runRef, typ, ev.Reason, action, note)
	}
}

// maxNote bounds an event's note: the API server refuses notes over 1 KiB.
const maxNote = 1000

// objectOf is an object the events library can record an event on, as ref names it.
func objectOf(ref *corev1.ObjectReference) runtime.Object {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(ref.GroupVersionKind())
	m.SetNamespace(ref.Namespace)
	m.SetName(ref.Name)
	m.SetUID(ref.UID)
	m.SetResourceVersion(ref.ResourceVersion)
	return m
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

// Truncate cuts s to at most n bytes on a rune boundary, marking the cut with "...".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
