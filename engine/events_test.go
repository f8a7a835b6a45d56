package engine

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
)

// libraryEvents records what goes through the events library.
type libraryEvents struct {
	recorder.EventRecorder
	reasons []string
}

func (l *libraryEvents) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	l.reasons = append(l.reasons, reason)
}

// A pass that wrote the run names it at a version no other pass has, so its events skip the
// library's cache; a pass that wrote nothing may come again alike, and the library must fold it.
func TestEmitOnRunWrittenOrNot(t *testing.T) {
	run := &v1alpha1.TeardownRun{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-1", UID: "r1", ResourceVersion: "7"}}
	key := NewTargetKey(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "shop", "orders")
	target := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "t1"}}
	ev := pipeline.Event{Reason: v1alpha1.ReasonRetryRefused, Note: "the run is Running, not Failed"}
	for name, tc := range map[string]struct {
		written           bool
		library, unCached int
	}{
		"written: sent without the library's cache": {written: true, unCached: 2},
		"unwritten: through the library":            {written: false, library: 2},
	} {
		t.Run(name, func(t *testing.T) {
			lib := &libraryEvents{}
			once := newOnceEvents(nil, "teardown-operator", logr.Discard())
			s := newEventSink(lib, once, func(context.Context, string) bool { return false })
			s.emitOnRun(context.Background(), run, key, target, ev, tc.written)
			if len(lib.reasons) != tc.library || len(once.queue) != tc.unCached {
				t.Errorf("%d events through the library, %d without its cache; want %d and %d",
					len(lib.reasons), len(once.queue), tc.library, tc.unCached)
			}
			if tc.written {
				first := <-once.queue
				if first.Regarding.ResourceVersion != "7" || first.Regarding.Kind != "TeardownRun" {
					t.Errorf("the event on the run does not name it as written: %+v", first.Regarding)
				}
			}
		})
	}
}
