package engine

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/admissiontrust"
)

func TestPolicyStatus(t *testing.T) {
	two, five := 2, 5
	missing := &admissiontrust.MissingError{Kind: "ValidatingAdmissionPolicy", Name: v1alpha1.AdmissionPolicyName}
	installed := []admissionRead{{Name: v1alpha1.AdmissionPolicyName}, {Name: v1alpha1.MarksPolicyName}}
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, ObservedGeneration: 3}
	}
	earlier := v1alpha1.TeardownPolicyStatus{Protected: 7, ActiveRuns: 1, StuckRuns: 1, MatchErrors: 4, ObservedGeneration: 2,
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProtecting, ObservedGeneration: 2},
			{Type: v1alpha1.ConditionVetoEnforced, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAdmissionInstalled, ObservedGeneration: 2}}}
	for name, tc := range map[string]struct {
		facts policyFacts
		want  v1alpha1.TeardownPolicyStatus
	}{
		"compiled and counted": {
			policyFacts{Ready: ready(v1alpha1.ReasonProtecting, "protecting"), Protected: &five, Runs: &runCounts{active: 2, stuck: 0}, MatchErrors: &two},
			v1alpha1.TeardownPolicyStatus{Protected: 5, ActiveRuns: 2, MatchErrors: 2,
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonProtecting)}}},
		"not counted (a watch not synced): the counts stay, and so does Ready when the watches have not started": {
			policyFacts{},
			v1alpha1.TeardownPolicyStatus{Protected: 7, ActiveRuns: 1, StuckRuns: 1, MatchErrors: 4,
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProtecting, ObservedGeneration: 2}}}},
		"invalid": {
			policyFacts{Ready: notReady(v1alpha1.ReasonInvalidSpec, "spec.steps[0].when: ERROR")},
			v1alpha1.TeardownPolicyStatus{Protected: 7, ActiveRuns: 1, StuckRuns: 1, MatchErrors: 4,
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)}}},
		"vetoes, the admission policy and its binding installed": {
			policyFacts{Ready: ready(v1alpha1.ReasonProtecting, "protecting"), Vetoes: true, Admission: installed},
			v1alpha1.TeardownPolicyStatus{Protected: 7, ActiveRuns: 1, StuckRuns: 1, MatchErrors: 4,
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonProtecting),
					cond(v1alpha1.ConditionVetoEnforced, metav1.ConditionTrue, v1alpha1.ReasonAdmissionInstalled)}}},
		"vetoes, the admission policy missing": {
			policyFacts{Vetoes: true, Admission: []admissionRead{{Name: v1alpha1.AdmissionPolicyName, Err: missing}, {Name: v1alpha1.MarksPolicyName}}},
			v1alpha1.TeardownPolicyStatus{Protected: 7, ActiveRuns: 1, StuckRuns: 1, MatchErrors: 4,
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProtecting, ObservedGeneration: 2},
					cond(v1alpha1.ConditionVetoEnforced, metav1.ConditionFalse, v1alpha1.ReasonAdmissionMissing)}}},
		"vetoes, the binding unreadable": {
			policyFacts{Vetoes: true, Admission: []admissionRead{{Name: v1alpha1.AdmissionPolicyName}, {Name: v1alpha1.MarksPolicyName, Err: errors.New("connection refused")}}},
			v1alpha1.TeardownPolicyStatus{Protected: 7, ActiveRuns: 1, StuckRuns: 1, MatchErrors: 4,
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProtecting, ObservedGeneration: 2},
					cond(v1alpha1.ConditionVetoEnforced, metav1.ConditionUnknown, v1alpha1.ReasonAdmissionUnverified)}}},
		"vetoes, the marks policy edited": {
			policyFacts{Vetoes: true, Admission: []admissionRead{{Name: v1alpha1.AdmissionPolicyName}, {Name: v1alpha1.MarksPolicyName, NotEnforced: "edited"}}},
			v1alpha1.TeardownPolicyStatus{Protected: 7, ActiveRuns: 1, StuckRuns: 1, MatchErrors: 4,
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProtecting, ObservedGeneration: 2},
					cond(v1alpha1.ConditionVetoEnforced, metav1.ConditionFalse, v1alpha1.ReasonAdmissionChanged)}}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.facts.Generation, tc.facts.Finalizer = 3, "teardownpolicy.teardown.dev/p"
			tc.want.ObservedGeneration, tc.want.Finalizer = 3, "teardownpolicy.teardown.dev/p"
			got := policyStatus(earlier, tc.facts)
			opts := cmp.Options{cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime", "Message")}
			if diff := cmp.Diff(tc.want, got, opts); diff != "" {
				t.Errorf("policyStatus (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVetoEnforcedMessages(t *testing.T) {
	c := vetoEnforced([]admissionRead{{Name: v1alpha1.AdmissionPolicyName,
		Err: &admissiontrust.MissingError{Kind: "ValidatingAdmissionPolicyBinding", Name: v1alpha1.AdmissionPolicyName}}, {Name: v1alpha1.MarksPolicyName}})
	if want := "ValidatingAdmissionPolicyBinding teardown.dev-deletion-guard is not installed: verdicts are published on objects and nothing refuses their deletion; install config/admission (the Helm chart does)"; c.Message != want {
		t.Errorf("message %q, want %q", c.Message, want)
	}
	c = vetoEnforced([]admissionRead{{Name: v1alpha1.AdmissionPolicyName},
		{Name: v1alpha1.MarksPolicyName, Err: &admissiontrust.MissingError{Kind: "ValidatingAdmissionPolicy", Name: v1alpha1.MarksPolicyName}}})
	if want := "ValidatingAdmissionPolicy teardown.dev-marks is not installed: anyone who may patch a vetoed object can remove its verdict (label teardown.dev/deletion-guard) and then delete it; install config/admission (the Helm chart does)"; c.Message != want || c.Status != metav1.ConditionFalse {
		t.Errorf("status %s, message %q, want False, %q", c.Status, c.Message, want)
	}
}
