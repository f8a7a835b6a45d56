package eventsink

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	eventsclient "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func TestSenderNeverBlocks(t *testing.T) {
	f := newSender(nil, "teardown-operator", logr.Discard())
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Name: "orders", UID: "u1"}
	for range senderBacklog + 10 {
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

// recordingEvents takes event creates in memory: these tests are about what the sender does with
// its queue and its retries, not about the API server (the integration suite sends to a real one).
// It answers each create with the next error of script (nil once the script is done), and records
// when each came and, for those it took, whose event it was.
type recordingEvents struct {
	eventsclient.EventInterface
	mu      sync.Mutex
	script  []error
	at      []time.Time
	created []string
}

func (r *recordingEvents) Events(string) eventsclient.EventInterface { return r }

func (r *recordingEvents) Create(_ context.Context, ev *eventsv1.Event, _ metav1.CreateOptions) (*eventsv1.Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, time.Now())
	if len(r.script) > 0 {
		err := r.script[0]
		r.script = r.script[1:]
		if err != nil {
			return nil, err
		}
	}
	r.created = append(r.created, ev.Regarding.Name)
	return ev, nil
}

func TestSenderSendsAtShutdown(t *testing.T) {
	sink := &recordingEvents{}
	f := newSender(sink, "teardown-operator", logr.Discard())
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

// The manager stops its runnables before its reconcilers, which go on emitting as they finish
// their last passes: the sender must take what they emit after that, until the engine's Shutdown.
func TestEventsOutliveTheManager(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		MapperProvider:         func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mapper, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Setup(mgr, func(context.Context, string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	sink := &recordingEvents{}
	s.once.client = sink
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 5 { // a reconciler's last pass, after the manager stopped its runnables
		s.once.send(&corev1.ObjectReference{Name: fmt.Sprint(i)}, nil, corev1.EventTypeNormal, "StepSucceeded", "StepSucceeded", "done")
	}
	s.Shutdown()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.created) != 5 {
		t.Errorf("sent %d of the 5 events emitted after the manager stopped", len(sink.created))
	}
}
