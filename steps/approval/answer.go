package approval

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// Answer is the TeardownApproval in which approver answers an attempt of an approval step of
// run: named for the run, step, attempt and approver (one answer each), labelled with its run so
// that the operator sees it at once, and owned by the run so that it goes with it.
func Answer(run *v1alpha1.TeardownRun, step string, attempt int32, decision v1alpha1.ApprovalDecision, reason string, approver v1alpha1.Approver) *v1alpha1.TeardownApproval {
	return &v1alpha1.TeardownApproval{
		ObjectMeta: metav1.ObjectMeta{
			Name:      naming.ApprovalName(run.UID, step, attempt, approver.Username),
			Namespace: run.Namespace,
			Labels: map[string]string{v1alpha1.LabelRun: run.Name, v1alpha1.LabelRunNamespace: run.Namespace, v1alpha1.LabelRunUID: string(run.UID),
				v1alpha1.LabelStep: step, v1alpha1.LabelAttempt: fmt.Sprint(attempt)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TeardownRun", Name: run.Name, UID: run.UID}},
		},
		Spec: v1alpha1.TeardownApprovalSpec{Run: run.Name, RunUID: run.UID, Step: step, Attempt: attempt, Decision: decision, Reason: reason, Approver: approver},
	}
}
