package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	eventsclient "k8s.io/client-go/kubernetes/typed/events/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

func TestOnceEventsNeverBlock(t *testing.T) {
	f := newOnceEvents(nil, "teardown-operator", logr.Discard())
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Name: "orders", UID: "u1"}
	for range onceEventBacklog + 10 {
		f.send(ref, nil, corev1.EventTypeNormal, "TeardownSucceeded", "TeardownSucceeded", "done")
	}
	if got := f.dropped.Load(); got != 10 {
		t.Errorf("dropped %d events past the backlog, want 10", got)
	}
	ev := <-f.queue
	if ev.Namespace != "default" || !strings.HasPrefix(ev.Name, "orders.") || ev.Regarding.UID != "u1" ||
		ev.ReportingController != "teardown-operator" || !strings.HasPrefix(ev.ReportingInstance, "teardown-operator-") || ev.EventTime.IsZero() {
		t.Errorf("event not made as the events library makes a first event: %+v", ev)
	}
}

// recordingEvents takes event creates in memory: the shutdown below is about what the sender does
// with its queue, not about the API server (the integration suite sends to a real one).
type recordingEvents struct {
	eventsclient.EventInterface
	mu      sync.Mutex
	created []string
}

func (r *recordingEvents) Events(string) eventsclient.EventInterface { return r }

func (r *recordingEvents) Create(_ context.Context, ev *eventsv1.Event, _ metav1.CreateOptions) (*eventsv1.Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.created = append(r.created, ev.Regarding.Name)
	return ev, nil
}

func TestOnceEventsSentAtShutdown(t *testing.T) {
	sink := &recordingEvents{}
	f := newOnceEvents(sink, "teardown-operator", logr.Discard())
	for i := range 20 {
		f.send(&corev1.ObjectReference{Name: fmt.Sprint(i)}, nil, corev1.EventTypeNormal, "TeardownSucceeded", "TeardownSucceeded", "done")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stopped before it started: what was queued must still go
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sink.created) != 20 || len(f.queue) != 0 {
		t.Errorf("sent %d of 20 queued events at shutdown, %d left", len(sink.created), len(f.queue))
	}
}

// TestSentOnce pins which reasons skip the events library's cache: only those a run emits at most
// once. One sent that way twice would be two events where the library makes a series.
func TestSentOnce(t *testing.T) {
	for reason, want := range map[string]bool{
		v1alpha1.ReasonRunCreated:       true,
		v1alpha1.ReasonStepSucceeded:    true,
		v1alpha1.ReasonStepSkipped:      true,
		v1alpha1.ReasonSucceeded:        true,
		v1alpha1.ReasonAbandoned:        true,
		v1alpha1.ReasonStepStarted:      false, // each attempt
		v1alpha1.ReasonStepRetrying:     false,
		v1alpha1.ReasonStepFailed:       false,
		v1alpha1.ReasonFailed:           false, // a retried run may fail again
		v1alpha1.ReasonPipelineTimedOut: false,
		v1alpha1.ReasonCancelled:        false, // a new delete request starts over
		v1alpha1.ReasonRetried:          false,
		v1alpha1.ReasonRunRetried:       false,
		v1alpha1.ReasonRetryRefused:     false,
		v1alpha1.ReasonDeleteRequested:  false,
		v1alpha1.ReasonDeleteFailed:     false,
	} {
		if got := sentOnce(reason); got != want {
			t.Errorf("sentOnce(%s) = %v, want %v", reason, got, want)
		}
	}
}
