package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// maxIgnored bounds the answers a step says it ignored (the status field's MaxItems).
const maxIgnored = 10

// clockSkew is how far the operator's clock may be ahead of the API server's: an answer created
// (by the API server's clock) up to this long before the attempt asked (by the operator's) still
// counts for it.
const clockSkew = 5 * time.Second

// Execute implements steps.Action: it counts the answers to the step's current attempt that it
// has not counted yet, then succeeds once enough distinct people approved, fails the attempt on
// a rejection, or waits.
func (a *action) Execute(ctx context.Context, in *steps.Input) steps.Result {
	return a.evaluate(ctx, in, time.Time{})
}

// Settled implements steps.Settler: at the step's deadline, the answers given by then still
// decide it (an approval given in time and seen late, the operator down, counts).
func (a *action) Settled(ctx context.Context, in *steps.Input, deadline time.Time) (steps.Result, bool) {
	r := a.evaluate(ctx, in, deadline)
	return r, r.Outcome != steps.InProgress
}

// evaluate counts the answers given up to cutoff (zero: all) and decides.
func (a *action) evaluate(ctx context.Context, in *steps.Input, cutoff time.Time) steps.Result {
	rec, err := a.record(ctx, in)
	if err != nil {
		return steps.Fail(false, "%v", err)
	}
	since, err := a.ledger.Enforced(ctx)
	if err != nil {
		return a.waiting(rec, in, ErrorInterval, "approvals are not counted: "+err.Error())
	}
	answers, err := a.ledger.Answers(ctx, in.Run)
	if err != nil {
		return a.waiting(rec, in, ErrorInterval, fmt.Sprintf("cannot list the approvals: %v", err))
	}
	if !cutoff.IsZero() {
		answers = slices.DeleteFunc(answers, func(ans v1alpha1.TeardownApproval) bool { return ans.CreationTimestamp.After(cutoff) })
	}
	if err := a.count(ctx, in, rec, answers, since); err != nil {
		return a.waiting(rec, in, ErrorInterval, err.Error())
	}
	return a.decide(in, rec)
}

// record is the step's approval status so far, with its request rendered when the step starts;
// an attempt after a failed one asks again from now.
func (a *action) record(ctx context.Context, in *steps.Input) (*v1alpha1.ApprovalStatus, error) {
	var rec *v1alpha1.ApprovalStatus
	if in.Status.Approval != nil {
		rec = in.Status.Approval.DeepCopy()
	} else {
		rec = &v1alpha1.ApprovalStatus{Required: a.required}
		if a.message != nil {
			msg, err := a.message.Render(ctx, in.Vars)
			if err != nil {
				return nil, fmt.Errorf("approval.message: %w", err)
			}
			rec.Request = msg
		}
	}
	if rec.Attempt != in.Status.Attempts || rec.AskedTime == nil {
		asked := metav1.NewTime(in.Now)
		rec.Attempt, rec.AskedTime = in.Status.Attempts, &asked
	}
	return rec, nil
}

// count records the answers to the current attempt not yet counted or ignored, oldest first.
func (a *action) count(ctx context.Context, in *steps.Input, rec *v1alpha1.ApprovalStatus, answers []v1alpha1.TeardownApproval, since time.Time) error {
	slices.SortFunc(answers, func(x, y v1alpha1.TeardownApproval) int {
		if c := x.CreationTimestamp.Compare(y.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	for i := range answers {
		ans := &answers[i]
		s := ans.Spec
		if s.RunUID != in.Run.UID || s.Step != a.step || s.Attempt != in.Status.Attempts || seen(rec, ans.Name) {
			continue
		}
		if s.Run != in.Run.Name {
			// The admission policy checked RBAC for the run spec.run names, not this one.
			ignore(rec, ans.Name, fmt.Sprintf("spec.run names run %q, not this run %q", s.Run, in.Run.Name))
			continue
		}
		if why := a.untrusted(rec, ans, since); why != "" {
			ignore(rec, ans.Name, why)
			continue
		}
		ok, why, err := a.ledger.MayApprove(ctx, s.Approver, in.Run)
		if err != nil {
			return err
		}
		if !ok {
			ignore(rec, ans.Name, why)
			continue
		}
		rec.Decisions = append(rec.Decisions, v1alpha1.ApprovalRecord{Decision: s.Decision, Approver: s.Approver, Reason: s.Reason,
			Time: ans.CreationTimestamp, Attempt: s.Attempt, Approval: ans.Name})
	}
	return nil
}

// untrusted says why an answer does not count before RBAC is asked, if it does not: given
// before the admission policy that checks approvers was in force, or before the attempt asked;
// a second answer of one person; someone the step does not name.
func (a *action) untrusted(rec *v1alpha1.ApprovalStatus, ans *v1alpha1.TeardownApproval, since time.Time) string {
	at, who := ans.CreationTimestamp.Time, ans.Spec.Approver.Username
	switch {
	case at.Before(since):
		return fmt.Sprintf("given at %s, before the admission policy %s that checks approvers was in force (%s): not trusted; answer again",
			at.UTC().Format(time.RFC3339), v1alpha1.ApprovalPolicyName, since.UTC().Format(time.RFC3339))
	case rec.AskedTime != nil && at.Before(rec.AskedTime.Add(-clockSkew)):
		return fmt.Sprintf("given at %s, before attempt %d asked (%s)", at.UTC().Format(time.RFC3339), rec.Attempt, rec.AskedTime.UTC().Format(time.RFC3339))
	}
	for _, d := range rec.Decisions {
		if d.Attempt == ans.Spec.Attempt && d.Approver.Username == who {
			return fmt.Sprintf("%s already answered attempt %d (%s): an answer cannot change", who, d.Attempt, d.Approval)
		}
	}
	return a.notApprover(ans.Spec.Approver)
}

// decide says where the step stands on the answers counted.
func (a *action) decide(in *steps.Input, rec *v1alpha1.ApprovalStatus) steps.Result {
	attempt := in.Status.Attempts
	for _, d := range rec.Decisions {
		if d.Attempt == attempt && d.Decision == v1alpha1.Reject {
			r := steps.Fail(true, "rejected by %s: %s", d.Approver.Username, d.Reason)
			r.Approval = rec
			return r
		}
	}
	approved := rec.Approved(attempt)
	if int32(len(approved)) < rec.Required {
		return a.waiting(rec, in, CheckInterval, "")
	}
	raw, _ := json.Marshal(approved) // a list of strings always encodes
	r := steps.Done("approved by %s", strings.Join(approved, ", "))
	r.Approval = rec
	r.Outputs = map[string]apiextensionsv1.JSON{OutputApprovedBy: {Raw: raw}}
	return r
}

// waiting says what the step waits for, and how to answer.
func (a *action) waiting(rec *v1alpha1.ApprovalStatus, in *steps.Input, after time.Duration, problem string) steps.Result {
	n := len(rec.Approved(in.Status.Attempts))
	var b strings.Builder
	fmt.Fprintf(&b, "waiting for approval (%d of %d", n, rec.Required)
	if a.approvers != nil {
		fmt.Fprintf(&b, ", from %s", a.who())
	}
	b.WriteString(")")
	if rec.Request != "" {
		b.WriteString(": " + rec.Request)
	}
	if problem != "" {
		b.WriteString("; " + problem)
	} else {
		fmt.Fprintf(&b, "; kubectl teardown approve %s -n %s --reason ... (or reject)", in.Run.Name, in.Run.Namespace)
	}
	r := steps.Waiting(after, "%s", b.String())
	r.Approval = rec
	return r
}

// notApprover says why approver does not count for the step's approvers, if it does not.
func (a *action) notApprover(approver v1alpha1.Approver) string {
	if a.approvers == nil || slices.Contains(a.approvers.Users, approver.Username) ||
		slices.ContainsFunc(approver.Groups, func(g string) bool { return slices.Contains(a.approvers.Groups, g) }) {
		return ""
	}
	return fmt.Sprintf("%s is not among the step's approvers (%s)", approver.Username, a.who())
}

func (a *action) who() string { return Describe(a.approvers) }

// Describe names a step's approvers in words: "users alice or groups dba".
func Describe(ap *v1alpha1.Approvers) string {
	var parts []string
	if u := ap.Users; len(u) > 0 {
		parts = append(parts, "users "+strings.Join(u, ", "))
	}
	if g := ap.Groups; len(g) > 0 {
		parts = append(parts, "groups "+strings.Join(g, ", "))
	}
	return strings.Join(parts, " or ")
}

// seen reports whether the answer named approval was counted or ignored already.
func seen(rec *v1alpha1.ApprovalStatus, approval string) bool {
	for _, d := range rec.Decisions {
		if d.Approval == approval {
			return true
		}
	}
	return slices.ContainsFunc(rec.Ignored, func(s string) bool { return strings.HasPrefix(s, approval+": ") })
}

// ignore records why an answer does not count; past maxIgnored the oldest reasons go (such an
// answer is then checked again at each pass, and ignored again).
func ignore(rec *v1alpha1.ApprovalStatus, approval, why string) {
	rec.Ignored = append(rec.Ignored, approval+": "+why)
	if n := len(rec.Ignored); n > maxIgnored {
		rec.Ignored = rec.Ignored[n-maxIgnored:]
	}
}
