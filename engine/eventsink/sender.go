package eventsink

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	eventsclient "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/record/util"
)

// sender sends events that cannot repeat: an object's last event (a teardown that succeeded
// in its first pass, after which the object is gone) and the events of a run on the run and on its
// object, which each name the run as one pass wrote it (see Sink.EmitOnRun). The events library keeps a
// copy of every event it sends for 6 to 12 minutes, to fold a repeat into a series; for these no
// repeat can come, and the copies (about 3 KiB an event) were most of the operator's memory under
// steady churn. These are sent the way the library sends a first event (the same fields, the same
// name) by a few workers, and forgotten once sent.
type sender struct {
	client     eventsclient.EventsGetter
	controller string
	instance   string
	log        logr.Logger
	queue      chan *eventsv1.Event
	dropped    atomic.Int64
}

const (
	// senderWorkers send events concurrently: an event create waits on the API server
	// about as long as the release it follows.
	senderWorkers = 8
	// senderBacklog bounds the events waiting to be sent while the API server is slow or
	// away; past it new ones are dropped (the run's status and the log still tell the outcome).
	senderBacklog = 4096
	// senderTries bounds the attempts to send one event through transport errors: waiting 1 s,
	// then twice as long each time up to senderRetryCap (jittered), they span 85 s or more, as
	// the events library's 12 tries 10 s apart span 2 minutes: an API server restart loses no event.
	senderTries    = 12
	senderRetryCap = 10 * time.Second
	// senderDrain bounds how long a stopping operator goes on sending queued events.
	senderDrain = 5 * time.Second
)

func newSender(client eventsclient.EventsGetter, controller string, log logr.Logger) *sender {
	hostname, _ := os.Hostname()
	return &sender{client: client, controller: controller, instance: controller + "-" + hostname,
		log: log, queue: make(chan *eventsv1.Event, senderBacklog)}
}

// send queues an event regarding ref (and related, if not nil); it never blocks.
func (f *sender) send(ref, related *corev1.ObjectReference, typ, reason, action, note string) {
	now := time.Now()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: util.GenerateEventName(ref.Name, now.UnixNano()), Namespace: ns},
		EventTime:  metav1.NewMicroTime(now), ReportingController: f.controller, ReportingInstance: f.instance,
		Action: action, Reason: reason, Regarding: *ref, Related: related, Note: note, Type: typ,
	}
	select {
	case f.queue <- ev:
	default:
		if n := f.dropped.Add(1); n == 1 || n%1000 == 0 {
			f.log.Error(nil, "dropped events: the API server does not take them as fast as they come", "dropped", n, "reason", reason)
		}
	}
}

// Start sends queued events until ctx ends, then what is still queued for up to
// senderDrain. The engine ends ctx once the manager has stopped (see Setup).
func (f *sender) Start(ctx context.Context) error {
	sendCtx, stopSending := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSending()
	var wg sync.WaitGroup
	for range senderWorkers {
		wg.Go(func() { f.work(ctx, sendCtx) })
	}
	<-ctx.Done()
	deadline := time.AfterFunc(senderDrain, stopSending)
	defer deadline.Stop()
	wg.Wait()
	if n := len(f.queue); n > 0 {
		f.log.Info("events not sent at shutdown", "events", n)
	}
	return nil
}

// work sends events until ctx ends, then until the queue is empty or sendCtx ends.
func (f *sender) work(ctx, sendCtx context.Context) {
	for {
		select {
		case ev := <-f.queue:
			f.create(sendCtx, ev)
		case <-ctx.Done():
			for sendCtx.Err() == nil {
				select {
				case ev := <-f.queue:
					f.create(sendCtx, ev)
				default:
					return
				}
			}
			return
		}
	}
}

// create sends one event, retrying transport errors; the API server's refusal is final.
func (f *sender) create(ctx context.Context, ev *eventsv1.Event) {
	for try := 1; ; try++ {
		_, err := f.client.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
		var status apierrors.APIStatus
		switch {
		case err == nil || apierrors.IsAlreadyExists(err):
			return
		case errors.As(err, &status) || ctx.Err() != nil:
			f.log.V(1).Info("event not written", "reason", ev.Reason, "regarding", ev.Regarding.Name, "error", err.Error())
			return
		case try == senderTries:
			f.log.Info("event not written: the API server was unreachable", "reason", ev.Reason, "regarding", ev.Regarding.Name, "tries", try, "error", err.Error())
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait.Jitter(min(time.Second<<(try-1), senderRetryCap), 0.5)):
		}
	}
}
