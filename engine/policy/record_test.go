package policy

import (
	"testing"

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
