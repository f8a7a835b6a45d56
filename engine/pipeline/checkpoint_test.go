package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// A step that checkpoints (an approval) ends its pass: who approved is written before the next
// step starts, and the run comes back at once. Each answer counted is told once.
func TestCheckpointEndsThePass(t *testing.T) {
	rec := func(ds ...v1alpha1.ApprovalRecord) *v1alpha1.ApprovalStatus {
		return &v1alpha1.ApprovalStatus{Required: 2, Decisions: ds}
	}
	alice := v1alpha1.ApprovalRecord{Decision: v1alpha1.Approve, Approver: v1alpha1.Approver{Username: "alice"}, Attempt: 1, Reason: "ok", Approval: "a"}
	bob := v1alpha1.ApprovalRecord{Decision: v1alpha1.Approve, Approver: v1alpha1.Approver{Username: "bob"}, Attempt: 1, Reason: "fine", Approval: "b"}
	waiting := steps.Waiting(time.Minute, "waiting")
	waiting.Approval = rec(alice)
	done := steps.Done("approved by alice, bob")
	done.Approval = rec(alice, bob)
	gate := step("gate", script(waiting, done))
	gate.Checkpoint = true
	next := script(steps.Done("dropped"))
	run, pipe := runOf(v1alpha1.FailurePolicyRetain, 0, gate, step("drop", next))

	out := Advance(context.Background(), run, at(pipe, 0))
	expect(t, "first pass", phases(run), "Running gate=Running drop=Pending")
	expect(t, "first pass events", reasons(out), "TeardownStarted,StepStarted,ApprovalRecorded")

	out = Advance(context.Background(), run, at(pipe, 1))
	expect(t, "second pass", phases(run), "Running gate=Succeeded drop=Pending")
	expect(t, "second pass events", reasons(out), "ApprovalRecorded,StepSucceeded")
	if next.calls != 0 || out.RequeueAfter != checkpointDelay {
		t.Errorf("the next step ran (%d calls) or the run does not come back at once (%s)", next.calls, out.RequeueAfter)
	}
	if got := run.Status.Step("gate").Approval; got == nil || len(got.Decisions) != 2 {
		t.Errorf("approval record not kept: %+v", got)
	}

	Advance(context.Background(), run, at(pipe, 2))
	expect(t, "third pass", phases(run), "Succeeded gate=Succeeded drop=Succeeded")
}

// The answer is written before the finally steps tell anyone of it: approved as the last step,
// or rejected, the pass stops there.
func TestCheckpointBeforeFinally(t *testing.T) {
	for name, result := range map[string]steps.Result{"approved": steps.Done("approved by alice"), "rejected": steps.Fail(true, "rejected by bob")} {
		t.Run(name, func(t *testing.T) {
			gate := step("gate", script(result))
			gate.Checkpoint = true
			chat := &notifier{result: steps.Done("sent")}
			run, pipe := runOf(v1alpha1.FailurePolicyRetain, 0, gate)
			withFinally(run, pipe, step("chat", chat))
			out := Advance(context.Background(), run, at(pipe, 0))
			if len(chat.seen) != 0 || run.Status.Ending != nil || out.RequeueAfter != checkpointDelay {
				t.Fatalf("finally ran in the answer's pass (%v), ending %+v, requeue %s", chat.seen, run.Status.Ending, out.RequeueAfter)
			}
			Advance(context.Background(), run, at(pipe, time.Millisecond))
			if len(chat.seen) != 1 || !run.Status.Phase.Finished() {
				t.Errorf("next pass: chat %v, phase %s", chat.seen, run.Status.Phase)
			}
		})
	}
}
