package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// TestFollowObject: what status KIND/NAME says of an object at each stage of its teardown, and
// when --watch ends with which exit.
func TestFollowObject(t *testing.T) {
	const fin = "teardownpolicy.teardown.dev/dump"
	deleting := metav1.NewTime(time.Now().Add(-3 * time.Minute))
	object := func(deleted bool, fins ...string) *metav1.PartialObjectMetadata {
		o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "u1", Finalizers: fins}}
		if deleted {
			o.DeletionTimestamp = &deleting
		}
		return o
	}
	run := func(phase v1alpha1.RunPhase, fp v1alpha1.FailurePolicy) v1alpha1.TeardownRun {
		r := v1alpha1.TeardownRun{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-1a2b"}}
		r.Spec.Target.UID, r.Spec.Pipeline.FailurePolicy = "u1", fp
		r.Status.Phase, r.Status.Message = phase, "step dump failed: 403"
		return r
	}
	down := operatorState{Known: true, Lease: "teardown-system/teardown-operator.teardown.dev", Since: time.Now().Add(-time.Hour), Renewed: time.Now().Add(-time.Hour)}
	unknown := operatorState{Why: "no lease"}
	tests := map[string]struct {
		look     objectLook
		operator operatorState
		says     []string // in the text printed above the runs
		note     string   // in the operator's line; "" for none
		ended    bool
		exit     int // ExitOK, or the outcome's code once ended
	}{
		"protected, not deleted": {look: objectLook{live: object(false, fin)}, operator: unknown,
			says: []string{"ConfigMap shop/orders  not being deleted  (uid u1)", "protected by  " + fin, "runs start when it is deleted"}},
		"not protected": {look: objectLook{live: object(false)}, operator: unknown,
			says: []string{"not protected: no teardown finalizer on it"}},
		"being deleted, no run, operator down": {look: objectLook{live: object(true, fin, "example.com/keep")}, operator: down,
			says: []string{"being deleted since " + deleting.UTC().Format(time.RFC3339) + " (3m ago)", "held by  " + fin,
				"other controllers' finalizers: example.com/keep", "no teardown run has started: the operator is not running"},
			note: "NOT RUNNING"},
		"being deleted, no run yet": {look: objectLook{live: object(true, fin)}, operator: unknown,
			says: []string{"no teardown run has started: the operator has not acted on it yet"}, note: "operator: unknown"},
		"in flight": {look: objectLook{live: object(true, fin), runs: []v1alpha1.TeardownRun{run(v1alpha1.RunRunning, "")}}, operator: unknown,
			note: "operator: unknown"},
		"succeeded, finalizer not yet removed": {look: objectLook{live: object(true, fin), runs: []v1alpha1.TeardownRun{run(v1alpha1.RunSucceeded, "")}}},
		"succeeded, held by another controller only": {look: objectLook{live: object(true, "example.com/keep"),
			runs: []v1alpha1.TeardownRun{run(v1alpha1.RunSucceeded, "")}}, ended: true},
		"failed under Retain keeps it": {look: objectLook{live: object(true, fin), runs: []v1alpha1.TeardownRun{run(v1alpha1.RunFailed, v1alpha1.FailurePolicyRetain)}},
			ended: true, exit: ExitFindings},
		"succeeded and gone": {look: objectLook{runs: []v1alpha1.TeardownRun{run(v1alpha1.RunSucceeded, "")}},
			says: []string{"ConfigMap shop/orders  gone  (uid u1)"}, ended: true},
		"failed under Release, gone": {look: objectLook{runs: []v1alpha1.TeardownRun{run(v1alpha1.RunFailed, v1alpha1.FailurePolicyRelease)}},
			ended: true, exit: ExitFindings},
		"abandoned, gone":       {look: objectLook{runs: []v1alpha1.TeardownRun{run(v1alpha1.RunAbandoned, "")}}, ended: true, exit: ExitFindings},
		"gone with no run kept": {look: objectLook{}, says: []string{"no TeardownRun of it is kept"}, ended: true},
		"gone, its name taken again, earlier objects": {look: objectLook{
			successor: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: "u9", CreationTimestamp: metav1.Now()}},
			runs:      []v1alpha1.TeardownRun{run(v1alpha1.RunSucceeded, "")}, others: map[types.UID]int{"u0": 2}},
			says: []string{"exists again (uid u9", "1 other object(s) of that name have kept runs, not shown: uid u0 (2 run(s))"}, ended: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			f := &followed{arg: "configmap/orders", gvk: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, namespace: "shop", name: "orders", uid: "u1"}
			var b strings.Builder
			tt.look.print(&b, f, tt.operator)
			for _, s := range tt.says {
				if !strings.Contains(b.String(), s) {
					t.Errorf("printed:\n%s\nwant it to say %q", b.String(), s)
				}
			}
			if strings.Contains(b.String(), "runs start when") && tt.look.live != nil && tt.look.live.DeletionTimestamp != nil {
				t.Errorf("says runs start when it is deleted, of an object being deleted:\n%s", b.String())
			}
			note := operatorNote(&statusLook{runs: tt.look.runs, object: &tt.look, operator: tt.operator})
			if tt.note == "" && note != "" || !strings.Contains(note, tt.note) {
				t.Errorf("operator note %q, want %q", note, tt.note)
			}
			if got := tt.look.ended(); got != tt.ended {
				t.Fatalf("ended() = %v, want %v", got, tt.ended)
			}
			code := ExitOK
			var ee *ExitError
			if err := outcome(tt.look.runs); errors.As(err, &ee) {
				code = ee.Code
			}
			if tt.ended && code != tt.exit {
				t.Errorf("outcome exits %d, want %d", code, tt.exit)
			}
		})
	}
}
