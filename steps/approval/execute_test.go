package approval

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// ledger is a scripted Ledger: its answers, who RBAC denies, and what fails.
type ledger struct {
	answers    []v1alpha1.TeardownApproval
	denied     map[string]bool
	reviewErr  error
	enforceErr error
	since      time.Time
	reviews    int
}

func (l *ledger) Answers(context.Context, *v1alpha1.TeardownRun) ([]v1alpha1.TeardownApproval, error) {
	return l.answers, nil
}

func (l *ledger) MayApprove(_ context.Context, a v1alpha1.Approver, _ *v1alpha1.TeardownRun) (bool, string, error) {
	l.reviews++
	if l.reviewErr != nil {
		return false, "", l.reviewErr
	}
	if l.denied[a.Username] {
		return false, a.Username + " lacks the verb", nil
	}
	return true, "", nil
}

func (l *ledger) Enforced(context.Context) (time.Time, error) { return l.since, l.enforceErr }

var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// answer is a TeardownApproval of run "r" (UID u1), step "ok", given at base plus i seconds.
func answer(i int, user string, d v1alpha1.ApprovalDecision, mods ...func(*v1alpha1.TeardownApprovalSpec)) v1alpha1.TeardownApproval {
	ta := v1alpha1.TeardownApproval{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-" + string(d), CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second))},
		Spec: v1alpha1.TeardownApprovalSpec{Run: "r", RunUID: "u1", Step: "ok", Attempt: 1, Decision: d, Reason: "because",
			Approver: v1alpha1.Approver{Username: user, Groups: []string{"team-" + user}}},
	}
	for _, m := range mods {
		m(&ta.Spec)
	}
	return ta
}

func renamed(ta v1alpha1.TeardownApproval, name string) v1alpha1.TeardownApproval {
	ta.Name = name
	return ta
}

func compile(t *testing.T, l Ledger, spec v1alpha1.ApprovalStep) steps.Action {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	a, errs := New(l).Compile(steps.CompileContext{Env: env}, &v1alpha1.Step{Name: "ok", Approval: &spec}, field.NewPath("spec", "steps").Index(0))
	if len(errs) > 0 {
		t.Fatalf("compile: %v", errs)
	}
	return a
}

func input(recorded *v1alpha1.ApprovalStatus) *steps.Input {
	run := &v1alpha1.TeardownRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "shop", UID: "u1"}}
	obj := map[string]any{"metadata": map[string]any{"name": "orders"}}
	return &steps.Input{Run: run, Status: &v1alpha1.StepStatus{Name: "ok", Phase: v1alpha1.StepRunning, Attempts: 1, Approval: recorded},
		Vars: expr.Vars{expr.VarObject: obj, "steps": map[string]any{}, "run": map[string]any{"name": "r"}}, Now: base}
}

func TestExecute(t *testing.T) {
	users := &v1alpha1.Approvers{Users: []string{"alice"}, Groups: []string{"team-dba"}}
	otherAttempt := func(s *v1alpha1.TeardownApprovalSpec) { s.Attempt = 2 }
	otherRun := func(s *v1alpha1.TeardownApprovalSpec) { s.RunUID = "u0" }
	otherStep := func(s *v1alpha1.TeardownApprovalSpec) { s.Step = "other" }
	tests := map[string]struct {
		spec      v1alpha1.ApprovalStep
		ledger    ledger
		recorded  *v1alpha1.ApprovalStatus
		outcome   steps.Outcome
		retryable bool
		message   string
		decisions int
		ignored   string
		reviews   int
	}{
		"no answer waits, saying what it asks and how to answer": {
			spec: v1alpha1.ApprovalStep{Message: "drop ${object.metadata.name}?"}, outcome: steps.InProgress,
			message: "waiting for approval (0 of 1): drop orders?; kubectl teardown approve r -n shop",
		},
		"one approval is enough by default": {
			ledger: ledger{answers: []v1alpha1.TeardownApproval{answer(1, "alice", v1alpha1.Approve)}}, outcome: steps.Succeeded,
			message: "approved by alice", decisions: 1, reviews: 1,
		},
		"two approvals of one person count once": {
			spec: v1alpha1.ApprovalStep{Required: 2},
			ledger: ledger{answers: []v1alpha1.TeardownApproval{answer(1, "alice", v1alpha1.Approve),
				renamed(answer(2, "alice", v1alpha1.Approve), "alice-again")}},
			outcome: steps.InProgress, message: "(1 of 2)", decisions: 1, reviews: 1,
			ignored: "alice-again: alice already answered attempt 1 (alice-Approve): an answer cannot change",
		},
		"a person's second answer does not change the first": {
			spec:    v1alpha1.ApprovalStep{Required: 2},
			ledger:  ledger{answers: []v1alpha1.TeardownApproval{answer(1, "alice", v1alpha1.Approve), answer(2, "alice", v1alpha1.Reject)}},
			outcome: steps.InProgress, message: "(1 of 2)", decisions: 1, reviews: 1,
			ignored: "alice-Reject: alice already answered attempt 1 (alice-Approve): an answer cannot change",
		},
		"an answer given before the admission policy was in force is not trusted": {
			ledger:  ledger{answers: []v1alpha1.TeardownApproval{answer(1, "alice", v1alpha1.Approve)}, since: base.Add(time.Minute)},
			outcome: steps.InProgress, message: "(0 of 1)",
			ignored: "alice-Approve: given at 2030-01-01T00:00:01Z, before the admission policy teardown.dev-approvals that checks approvers was in force (2030-01-01T00:01:00Z): not trusted; answer again",
		},
		"an answer given before the attempt asked does not count": {
			ledger:   ledger{answers: []v1alpha1.TeardownApproval{answer(1, "alice", v1alpha1.Approve)}},
			recorded: &v1alpha1.ApprovalStatus{Required: 1, Attempt: 1, AskedTime: &metav1.Time{Time: base.Add(time.Hour)}},
			outcome:  steps.InProgress, message: "(0 of 1)",
			ignored: "alice-Approve: given at 2030-01-01T00:00:01Z, before attempt 1 asked (2030-01-01T01:00:00Z)",
		},
		"two people make two": {
			spec:    v1alpha1.ApprovalStep{Required: 2},
			ledger:  ledger{answers: []v1alpha1.TeardownApproval{answer(2, "bob", v1alpha1.Approve), answer(1, "alice", v1alpha1.Approve)}},
			outcome: steps.Succeeded, message: "approved by alice, bob", decisions: 2, reviews: 2,
		},
		"a rejection fails the attempt, to be retried within the step's retry limit": {
			spec:    v1alpha1.ApprovalStep{Required: 2},
			ledger:  ledger{answers: []v1alpha1.TeardownApproval{answer(1, "alice", v1alpha1.Approve), answer(2, "bob", v1alpha1.Reject)}},
			outcome: steps.Failed, retryable: true, message: "rejected by bob: because", decisions: 2, reviews: 2,
		},
		"answers to another attempt, run or step are not this step's": {
			ledger: ledger{answers: []v1alpha1.TeardownApproval{answer(1, "a", v1alpha1.Reject, otherAttempt),
				answer(2, "b", v1alpha1.Reject, otherRun), answer(3, "c", v1alpha1.Reject, otherStep)}},
			outcome: steps.InProgress, message: "(0 of 1)",
		},
		"someone the step does not name is ignored, a member of a named group counts": {
			spec:    v1alpha1.ApprovalStep{Approvers: users},
			ledger:  ledger{answers: []v1alpha1.TeardownApproval{answer(1, "mallory", v1alpha1.Reject), answer(2, "dba", v1alpha1.Approve)}},
			outcome: steps.Succeeded, message: "approved by dba", decisions: 1, reviews: 1,
			ignored: "mallory-Reject: mallory is not among the step's approvers (users alice or groups team-dba)",
		},
		"someone RBAC denies is ignored": {
			ledger:  ledger{answers: []v1alpha1.TeardownApproval{answer(1, "mallory", v1alpha1.Reject)}, denied: map[string]bool{"mallory": true}},
			outcome: steps.InProgress, message: "(0 of 1)", ignored: "mallory-Reject: mallory lacks the verb", reviews: 1,
		},
		"an RBAC question that fails counts nothing, and is asked again": {
			ledger:  ledger{answers: []v1alpha1.TeardownApproval{answer(1, "alice", v1alpha1.Approve)}, reviewErr: errors.New("connection refused")},
			outcome: steps.InProgress, message: "connection refused", reviews: 1,
		},
		"without the admission policy nothing counts": {
			ledger:  ledger{answers: []v1alpha1.TeardownApproval{answer(1, "alice", v1alpha1.Approve)}, enforceErr: errors.New("not installed")},
			outcome: steps.InProgress, message: "approvals are not counted: not installed",
		},
		"an answer counted in an earlier pass is not asked about again": {
			ledger: ledger{answers: []v1alpha1.TeardownApproval{answer(1, "alice", v1alpha1.Approve)}},
			recorded: &v1alpha1.ApprovalStatus{Required: 2, Request: "kept", Decisions: []v1alpha1.ApprovalRecord{
				{Decision: v1alpha1.Approve, Approver: v1alpha1.Approver{Username: "alice"}, Attempt: 1, Approval: "alice-Approve"}}},
			outcome: steps.InProgress, message: "(1 of 2): kept", decisions: 1,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			l := tt.ledger
			r := compile(t, &l, tt.spec).Execute(context.Background(), input(tt.recorded))
			if r.Outcome != tt.outcome || r.Retryable != tt.retryable || !strings.Contains(r.Message, tt.message) {
				t.Errorf("got outcome %d retryable %t %q; want %d %t containing %q", r.Outcome, r.Retryable, r.Message, tt.outcome, tt.retryable, tt.message)
			}
			if r.Approval == nil {
				t.Fatal("no approval record")
			}
			if n := len(r.Approval.Decisions); n != tt.decisions {
				t.Errorf("%d decisions recorded, want %d: %+v", n, tt.decisions, r.Approval.Decisions)
			}
			if got := strings.Join(r.Approval.Ignored, "|"); got != tt.ignored {
				t.Errorf("ignored %q, want %q", got, tt.ignored)
			}
			if l.reviews != tt.reviews {
				t.Errorf("%d SubjectAccessReviews, want %d", l.reviews, tt.reviews)
			}
		})
	}
}

func TestSucceededOutputsApprovers(t *testing.T) {
	l := &ledger{answers: []v1alpha1.TeardownApproval{answer(1, "alice", v1alpha1.Approve)}}
	r := compile(t, l, v1alpha1.ApprovalStep{}).Execute(context.Background(), input(nil))
	if got := string(r.Outputs[OutputApprovedBy].Raw); got != `["alice"]` {
		t.Errorf("outputs.approvedBy = %s, want [\"alice\"]", got)
	}
	d := r.Approval.Decisions[0]
	if d.Approver.Groups[0] != "team-alice" || d.Reason != "because" || !d.Time.Equal(&metav1.Time{Time: base.Add(time.Second)}) || d.Approval != "alice-Approve" {
		t.Errorf("record %+v does not keep who, why, when and which answer", d)
	}
}

func TestCompileRefusesAnApprovalThatCanNeverCome(t *testing.T) {
	env, _ := expr.NewEnv()
	_, errs := New(&ledger{}).Compile(steps.CompileContext{Env: env}, &v1alpha1.Step{Name: "ok", Approval: &v1alpha1.ApprovalStep{
		Required: 2, Approvers: &v1alpha1.Approvers{Users: []string{"alice"}}}}, field.NewPath("spec", "steps").Index(0))
	if got := errs.ToAggregate(); got == nil || !strings.Contains(got.Error(), "spec.steps[0].approval.required: Invalid value: 2: 2 distinct approvals can never come from the 1 users named") {
		t.Errorf("errors = %v", got)
	}
}

func TestCompileErrors(t *testing.T) {
	env, _ := expr.NewEnv()
	_, errs := New(&ledger{}).Compile(steps.CompileContext{Env: env}, &v1alpha1.Step{Name: "ok", Approval: &v1alpha1.ApprovalStep{
		Message: "${object.", Approvers: &v1alpha1.Approvers{}}}, field.NewPath("spec", "steps").Index(0))
	got := errs.ToAggregate().Error()
	for _, want := range []string{"spec.steps[0].approval.message", "spec.steps[0].approval.approvers: Required value"} {
		if !strings.Contains(got, want) {
			t.Errorf("errors %q do not name %s", got, want)
		}
	}
}

// An answer given by the deadline but seen after it (the operator down) still decides the step;
// one given after it does not.
func TestSettledAtTheDeadline(t *testing.T) {
	a := compile(t, &ledger{answers: []v1alpha1.TeardownApproval{answer(10, "alice", v1alpha1.Approve)}}, v1alpha1.ApprovalStep{})
	s := a.(steps.Settler)
	if r, ok := s.Settled(context.Background(), input(nil), base.Add(20*time.Second)); !ok || r.Outcome != steps.Succeeded {
		t.Errorf("given before the deadline: %v %+v", ok, r)
	}
	if r, ok := s.Settled(context.Background(), input(nil), base.Add(5*time.Second)); ok {
		t.Errorf("given after the deadline, yet settled: %+v", r)
	}
}
