package engine

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

func TestExpired(t *testing.T) {
	ago := func(d time.Duration) *metav1.Time { tm := metav1.NewTime(time.Now().Add(-d)); return &tm }
	cases := []struct {
		name string
		run  v1alpha1.TeardownRun
		want bool
	}{
		{"not finished", v1alpha1.TeardownRun{}, false},
		{"completed within the retention", v1alpha1.TeardownRun{Status: v1alpha1.TeardownRunStatus{CompletionTime: ago(time.Minute)}}, false},
		{"completed before it", v1alpha1.TeardownRun{Status: v1alpha1.TeardownRunStatus{CompletionTime: ago(2 * time.Hour)}}, true},
		{"already being deleted", v1alpha1.TeardownRun{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: ago(0)},
			Status: v1alpha1.TeardownRunStatus{CompletionTime: ago(2 * time.Hour)}}, false},
	}
	for _, tc := range cases {
		if got := expired(&tc.run, time.Hour); got != tc.want {
			t.Errorf("%s: expired = %v, want %v", tc.name, got, tc.want)
		}
	}
	for retention, want := range map[time.Duration]time.Duration{2 * time.Second: time.Second, time.Hour: 6 * time.Minute, 7 * 24 * time.Hour: 10 * time.Minute} {
		if got := (&retentionSweeper{retention: retention}).interval(); got != want {
			t.Errorf("sweep interval for retention %s = %s, want %s", retention, got, want)
		}
	}
}

// A cached run is trimmed once it is only a record; its managed fields go unless they show who
// asked for a retry.
func TestTrimRun(t *testing.T) {
	full := func(phase v1alpha1.RunPhase) *v1alpha1.TeardownRun {
		run := &v1alpha1.TeardownRun{}
		run.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: FieldManager, FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`)}}
		run.Spec.Object.Raw = []byte(`{"kind":"ConfigMap"}`)
		run.Spec.Pipeline.Steps = []v1alpha1.Step{{Name: "a"}}
		run.Status.Phase = phase
		run.Status.Steps = []v1alpha1.StepStatus{{Name: "a"}}
		return run
	}
	running, _ := trimRun(full(v1alpha1.RunRunning))
	if r := running.(*v1alpha1.TeardownRun); r.ManagedFields != nil || r.Spec.Object.Raw == nil || len(r.Status.Steps) != 1 {
		t.Errorf("a running run keeps its pipeline and status, not its managed fields: %+v", r)
	}
	done, _ := trimRun(full(v1alpha1.RunSucceeded))
	if r := done.(*v1alpha1.TeardownRun); r.Spec.Object.Raw != nil || r.Spec.Pipeline.Steps != nil || r.Status.Steps != nil || r.Annotations[trimmedInCache] == "" {
		t.Errorf("a succeeded run is trimmed: %+v", r)
	}
	retried := full(v1alpha1.RunFailed)
	retried.Annotations = map[string]string{v1alpha1.AnnotationRetry: "alice: fixed"}
	kept, _ := trimRun(retried)
	if r := kept.(*v1alpha1.TeardownRun); len(r.ManagedFields) != 1 {
		t.Errorf("a run asked to retry keeps the managed fields that say when: %+v", r.ManagedFields)
	}
}
