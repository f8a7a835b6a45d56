package eventsink

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	target := &corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "orders", UID: "t1"}
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
			once := newSender(nil, "teardown-operator", logr.Discard())
			s := newSink(lib, once, func(context.Context, string) bool { return false })
			s.EmitOnRun(context.Background(), run, target, ev, tc.written)
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

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly-10", 10, "exactly-10"},
		{"abcdefghijkl", 10, "abcdefg..."},
		{"ééééééé", 10, "ééé..."}, // 2 bytes each: never cut inside a rune
	} {
		if got := Truncate(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
