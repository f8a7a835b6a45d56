package policy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

func TestReadsRunUID(t *testing.T) {
	cases := []struct {
		step v1alpha1.Step
		want bool
	}{
		{v1alpha1.Step{Name: "run-export", Wait: &v1alpha1.WaitStep{}}, false},
		{v1alpha1.Step{Name: "a", When: "run.attempt < 3 && run.name != '' && run.namespace != '' && run.step == 'a'"}, false},
		{v1alpha1.Step{Name: "a", When: "run.uid != ''"}, true},
		{v1alpha1.Step{Name: "notify", When: "run.phase != 'Succeeded'", HTTP: &v1alpha1.HTTPStep{URL: "https://x/${run.message}"}}, false},
		{v1alpha1.Step{Name: "a", When: "run . uid != ''"}, true},
		{v1alpha1.Step{Name: "a", When: "run['uid'] != ''"}, true},
		{v1alpha1.Step{Name: "a", HTTP: &v1alpha1.HTTPStep{URL: "https://x/${run.uid}"}}, true},
		{v1alpha1.Step{Name: "a", HTTP: &v1alpha1.HTTPStep{URL: "https://x/${string(run)}"}}, true},
		{v1alpha1.Step{Name: "a", HTTP: &v1alpha1.HTTPStep{URL: "https://x/${object.metadata.uid}"}}, false},
	}
	for _, tc := range cases {
		if got := readsRunUID(&tc.step); got != tc.want {
			t.Errorf("readsRunUID(%+v) = %v, want %v", tc.step, got, tc.want)
		}
	}
}

func TestReadsTargetFirst(t *testing.T) {
	c := compiler(t)
	wait := func(when, until string) v1alpha1.Step {
		s := v1alpha1.Step{Name: "a", When: when, Wait: &v1alpha1.WaitStep{Duration: zero()}}
		if until != "" {
			s.Wait = &v1alpha1.WaitStep{Until: until}
		}
		return s
	}
	tests := []struct {
		name       string
		step       v1alpha1.Step
		history    v1alpha1.RunHistory
		trigger    v1alpha1.Trigger
		readsObj   bool
		readsFirst bool
	}{
		{"OnFailure, a wait of 0s", wait("", ""), v1alpha1.RunHistoryOnFailure, "", false, false},
		{"OnFailure, a guard on run", wait("run.attempt < 2", ""), v1alpha1.RunHistoryOnFailure, "", false, false},
		{"OnFailure, a guard on the object's name", wait("object.metadata.name != 'x'", ""), v1alpha1.RunHistoryOnFailure, "", true, false},
		{"OnFailure, a guard on the object's annotations", wait("object.metadata.annotations['x'] != 'y'", ""), v1alpha1.RunHistoryOnFailure, "", true, true},
		{"OnFailure, a guard on the object's data", wait("object.data.x != 'y'", ""), v1alpha1.RunHistoryOnFailure, "", true, true},
		{"OnFailure, until over the object's labels", wait("", "has(object.metadata.labels)"), v1alpha1.RunHistoryOnFailure, "", true, false},
		{"OnFailure, until over the object's spec", wait("", "has(object.spec)"), v1alpha1.RunHistoryOnFailure, "", true, true},
		{"the default (SkipImmediateSuccess): the cached metadata is enough", wait("", ""), "", "", false, false},
		{"SkipImmediateSuccess, a guard on the object's data", wait("object.data.x != 'y'", ""), v1alpha1.RunHistorySkipImmediateSuccess, "", true, true},
		{"All: the cached metadata is enough too", wait("", ""), v1alpha1.RunHistoryAll, "", false, false},
		{"Always (All's earlier name), a guard on the object's labels", wait("has(object.metadata.labels)", ""), v1alpha1.RunHistoryAlways, "", true, false},
		{"All, a guard on the object's data", wait("object.data.x != 'y'", ""), v1alpha1.RunHistoryAll, "", true, true},
		{"OnFailure, two-phase: always recorded", wait("", ""), v1alpha1.RunHistoryOnFailure, v1alpha1.TriggerDeleteRequest, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := validSpec()
			spec.Steps = []v1alpha1.Step{tt.step}
			spec.RunHistory, spec.Trigger = tt.history, tt.trigger
			p := &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: spec}
			v, _ := ViewOf(p)
			got, errs := c.Compile(v)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if got.Pipeline.ReadsObject != tt.readsObj || got.ReadsTargetFirst() != tt.readsFirst {
				t.Errorf("ReadsObject, ReadsTargetFirst = %v, %v; want %v, %v", got.Pipeline.ReadsObject, got.ReadsTargetFirst(), tt.readsObj, tt.readsFirst)
			}
		})
	}
}
