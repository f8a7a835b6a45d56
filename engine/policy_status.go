package engine

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/admissiontrust"
)

// A policy's status is computed from facts its reconcile read, by policyStatus, a pure function,
// then written once (policyReconciler.report), and its gauges set from the same result.

// policyFacts are what a policy's status reports.
type policyFacts struct {
	Generation int64
	Finalizer  string
	// Ready is the Ready condition the compile (or the deletion) found; nil leaves it as it was
	// (the watches not started yet).
	Ready *readiness
	// Protected, Runs and MatchErrors are the counts taken; nil leaves a count as it was (a
	// watch not synced yet, a policy being deleted).
	Protected   *int
	Runs        *runCounts
	MatchErrors *int
	// Vetoes: the policy publishes verdicts the admission policy enforces (a deletion guard, or
	// trigger DeleteRequest); Admission is what was read of that admission policy then.
	Vetoes    bool
	Admission []admissionRead
	// Arming is the ProtectedFromCreation condition (policy_arming.go); nil leaves it as it was.
	Arming *metav1.Condition
	// History is what ended since the policy's history was last written; nil adds nothing.
	History *historyDelta
}

// readiness is a policy's Ready condition as its reconcile found it.
type readiness struct {
	status          metav1.ConditionStatus
	reason, message string
}

func ready(reason, message string) *readiness {
	return &readiness{status: metav1.ConditionTrue, reason: reason, message: message}
}

func notReady(reason, message string) *readiness {
	return &readiness{status: metav1.ConditionFalse, reason: reason, message: message}
}

// admissionRead is the read of one of the admission policies (with its binding) that enforce
// vetoes: the deletion guard's, and the marks' that keep a verdict on its object. Err is a
// *admissiontrust.MissingError when one is not installed; NotEnforced says why an installed one
// refuses less than it should.
type admissionRead struct {
	Name        string
	Err         error
	NotEnforced string
}

// vetoAdmission names the admission policies (each with its binding of the same name) without
// which a verdict refuses nothing: the deletion guard, and the marks policy without which anyone
// who may patch an object can take its verdict off.
var vetoAdmission = []string{v1alpha1.AdmissionPolicyName, v1alpha1.MarksPolicyName}

// policyStatus is the status a policy reports, from the one it had and the facts read now.
func policyStatus(prev v1alpha1.TeardownPolicyStatus, f policyFacts) v1alpha1.TeardownPolicyStatus {
	st := *prev.DeepCopy()
	st.ObservedGeneration, st.Finalizer = f.Generation, f.Finalizer
	st = withHistory(st, f.History)
	if f.Protected != nil {
		st.Protected = int32(*f.Protected)
	}
	if f.Runs != nil {
		st.ActiveRuns, st.StuckRuns = int32(f.Runs.active), int32(f.Runs.stuck)
	}
	if f.MatchErrors != nil {
		st.MatchErrors = int32(*f.MatchErrors)
	}
	if r := f.Ready; r != nil {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: r.status, Reason: r.reason,
			Message: r.message, ObservedGeneration: f.Generation})
	}
	if f.Arming != nil {
		c := *f.Arming
		c.ObservedGeneration = f.Generation
		meta.SetStatusCondition(&st.Conditions, c)
	}
	if !f.Vetoes {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionVetoEnforced)
		return st
	}
	c := vetoEnforced(f.Admission)
	c.ObservedGeneration = f.Generation
	meta.SetStatusCondition(&st.Conditions, c)
	return st
}

// vetoEnforced is the VetoEnforced condition of a policy that vetoes: whether the admission
// policies and their bindings are installed (without the deletion guard's its verdicts are
// published and nothing refuses a DELETE; without the marks', anyone who may patch an object
// can remove its verdict). Of several problems, the last read's is reported.
func vetoEnforced(reads []admissionRead) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionVetoEnforced, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAdmissionInstalled,
		Message: fmt.Sprintf("ValidatingAdmissionPolicies %s and %s and their bindings are installed: a DELETE of a vetoed object is refused, and only the operator can take a verdict off",
			v1alpha1.AdmissionPolicyName, v1alpha1.MarksPolicyName)}
	for _, r := range reads {
		var missing *admissiontrust.MissingError
		switch {
		case errors.As(r.Err, &missing) && r.Name == v1alpha1.MarksPolicyName:
			c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonAdmissionMissing
			c.Message = fmt.Sprintf("%s: anyone who may patch a vetoed object can remove its verdict (label %s) and then delete it; install config/admission (the Helm chart does)",
				missing, v1alpha1.LabelDeletionGuard)
		case errors.As(r.Err, &missing):
			c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonAdmissionMissing
			c.Message = fmt.Sprintf("%s: verdicts are published on objects and nothing refuses their deletion; install config/admission (the Helm chart does)", missing)
		case r.Err != nil:
			c.Status, c.Reason = metav1.ConditionUnknown, v1alpha1.ReasonAdmissionUnverified
			c.Message = fmt.Sprintf("cannot read the admission policy %s: %v", r.Name, r.Err)
		case r.NotEnforced != "":
			c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonAdmissionChanged
			c.Message = r.NotEnforced
		}
	}
	return c
}
