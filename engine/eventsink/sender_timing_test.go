package eventsink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// unreachable is a transport error: the API server did not answer.
var unreachable = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// TestSenderBackoff runs the sender's retries in a synctest bubble: its waits are virtual, so
// the whole 85 s and more of a give-up take no time, and the spans between tries are exact.
func TestSenderBackoff(t *testing.T) {
	refused := apierrors.NewForbidden(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "x", errors.New("no"))
	for _, tc := range []struct {
		name   string
		script []error
		tries  int
		// every wait between two tries is within [min, max): 1 s, doubling, capped at 10 s, jittered up to +50%
		minWait, maxWait []time.Duration
	}{
		{name: "sent at once", tries: 1},
		{name: "a refusal is final", script: []error{refused}, tries: 1},
		{name: "through three transport errors", script: repeat(unreachable, 3), tries: 4,
			minWait: seconds(1, 2, 4), maxWait: seconds(1.5, 3, 6)},
		{name: "gives up after senderTries", script: repeat(unreachable, senderTries+5), tries: senderTries,
			minWait: seconds(1, 2, 4, 8, 10, 10, 10, 10, 10, 10, 10), maxWait: seconds(1.5, 3, 6, 12, 15, 15, 15, 15, 15, 15, 15)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sink := &recordingEvents{script: tc.script}
				f := newSender(sink, "teardown-operator", logr.Discard())
				f.create(t.Context(), &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "shop"}})
				if len(sink.at) != tc.tries {
					t.Fatalf("%d tries, want %d", len(sink.at), tc.tries)
				}
				for i := 1; i < len(sink.at); i++ {
					if wait := sink.at[i].Sub(sink.at[i-1]); wait < tc.minWait[i-1] || wait >= tc.maxWait[i-1] {
						t.Errorf("wait %d: %s, want within [%s, %s)", i, wait, tc.minWait[i-1], tc.maxWait[i-1])
					}
				}
			})
		})
	}
}

func seconds(xs ...float64) []time.Duration {
	out := make([]time.Duration, len(xs))
	for i, x := range xs {
		out[i] = time.Duration(x * float64(time.Second))
	}
	return out
}

// TestSenderDrainBound: at shutdown with the API server unreachable, the sender gives up the
// events still queued after senderDrain, not after every event's tries.
func TestSenderDrainBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recordingEvents{script: repeat(unreachable, 1000)}
		f := newSender(sink, "teardown-operator", logr.Discard())
		for i := range 20 {
			f.send(&corev1.ObjectReference{Name: fmt.Sprint(i)}, nil, corev1.EventTypeNormal, "TeardownSucceeded", "TeardownSucceeded", "done")
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		start := time.Now()
		if err := f.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != senderDrain {
			t.Errorf("the stopping sender returned after %s, want senderDrain (%s)", took, senderDrain)
		}
		// Each worker was retrying one event when the drain ended (and may have taken one more
		// since, given up at its first try): the rest stay queued.
		if left := len(f.queue); left == 0 || left > 20-senderWorkers {
			t.Errorf("%d events left queued, want 1 to %d", left, 20-senderWorkers)
		}
	})
}
