package approval

import (
	"context"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/admissiontrust"
)

// Ledger is where an approval step reads the answers to a run and checks who gave them: the API
// server in the operator, a scripted world in kubectl teardown test.
type Ledger interface {
	// Answers lists the TeardownApprovals labelled with run (every step and attempt).
	Answers(ctx context.Context, run *v1alpha1.TeardownRun) ([]v1alpha1.TeardownApproval, error)
	// MayApprove asks RBAC whether approver may approve run (verb approve on teardownruns); when
	// not, why says so.
	MayApprove(ctx context.Context, approver v1alpha1.Approver, run *v1alpha1.TeardownRun) (allowed bool, why string, err error)
	// Enforced returns since when the admission policy that checks approvers (and its binding
	// that denies) is in force: answers created before then are not trusted. err says why none
	// can be.
	Enforced(ctx context.Context) (since time.Time, err error)
}

// PolicySettle is how long after the admission policy or its binding is created an answer is
// trusted (admissiontrust.Settle).
const PolicySettle = admissiontrust.Settle

// apiLedger is the Ledger of a running operator.
type apiLedger struct {
	// cached lists answers from the operator's cache (it watches TeardownApprovals).
	cached client.Client
	// reader reads the admission policy from the API server.
	reader client.Reader
}

// NewAPILedger returns a Ledger that lists answers through cached, reads the admission policy
// through reader, and creates SubjectAccessReviews through cached.
func NewAPILedger(cached client.Client, reader client.Reader) Ledger {
	return &apiLedger{cached: cached, reader: reader}
}

func (l *apiLedger) Answers(ctx context.Context, run *v1alpha1.TeardownRun) ([]v1alpha1.TeardownApproval, error) {
	var list v1alpha1.TeardownApprovalList
	err := l.cached.List(ctx, &list, client.InNamespace(run.Namespace), client.MatchingLabels{v1alpha1.LabelRunUID: string(run.UID)})
	return list.Items, err
}

func (l *apiLedger) MayApprove(ctx context.Context, approver v1alpha1.Approver, run *v1alpha1.TeardownRun) (bool, string, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: approver.Username, UID: approver.UID, Groups: approver.Groups,
		ResourceAttributes: Access(run),
	}}
	if err := l.cached.Create(ctx, sar); err != nil {
		return false, "", fmt.Errorf("asking RBAC whether %s may approve: %w", approver.Username, err)
	}
	if sar.Status.Allowed {
		return true, "", nil
	}
	why := fmt.Sprintf("%s lacks RBAC verb %q on teardownruns.%s %s in namespace %s", approver.Username, v1alpha1.ApproveVerb, v1alpha1.Group, run.Name, run.Namespace)
	if sar.Status.Reason != "" {
		why += " (" + sar.Status.Reason + ")"
	}
	return false, why, nil
}

// Access is the RBAC check that approving run takes.
func Access(run *v1alpha1.TeardownRun) *authorizationv1.ResourceAttributes {
	return &authorizationv1.ResourceAttributes{Group: v1alpha1.Group, Resource: "teardownruns", Verb: v1alpha1.ApproveVerb,
		Namespace: run.Namespace, Name: run.Name}
}

// Policy is the admission policy that checks approvers.
var Policy = admissiontrust.Policy{Name: v1alpha1.ApprovalPolicyName, Checks: "approvers", Noun: "approval"}

func (l *apiLedger) Enforced(ctx context.Context) (time.Time, error) {
	return admissiontrust.Since(ctx, l.reader, Policy)
}
