package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps/approval"
)

// answerOptions are approve's and reject's flags.
type answerOptions struct {
	decision v1alpha1.ApprovalDecision
	reason   string
	step     string
	timeout  time.Duration
}

func (r *root) approveCommand() *cobra.Command {
	return r.answerCommand(&answerOptions{decision: v1alpha1.Approve}, "approve", "Approve a run's approval step",
		`  kubectl teardown approve manageddatabase/orders -n shop --reason "snapshot snap-123 checked"`)
}

func (r *root) rejectCommand() *cobra.Command {
	return r.answerCommand(&answerOptions{decision: v1alpha1.Reject}, "reject", "Reject a run's approval step, which fails it",
		`  kubectl teardown reject manageddatabase/orders -n shop --reason "the snapshot is older than a day"`)
}

func (r *root) answerCommand(o *answerOptions, use, short, example string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use + " RUN | KIND/NAME --reason TEXT",
		Short: short,
		Long: short + ` waiting for people: creates a TeardownApproval that records your
answer, as the identity you are authenticated as, with your reason. The API server admits it only
if RBAC lets you "approve" the run (verb approve on teardownruns, in the run's namespace; the
ClusterRole teardown-operator-approver grants it). Then waits until the operator has counted the
answer. A rejection fails the step's attempt: its retry, onFailure and the policy's failurePolicy
apply as for any failed step. An answer cannot be changed.

Exits 0 once the operator counted the answer, 1 when it did not (not counted within --timeout, the
operator down, the answer refused or ignored), 2 on bad input or a run that waits for no approval.`,
		Example:           example,
		Args:              exactArgs(1, "one RUN or KIND/NAME"),
		ValidArgsFunction: r.completeRuns,
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(o.reason) == "" {
				return usageError("--reason is required: say why, it is recorded in the run")
			}
			if o.timeout <= 0 {
				return usageError("--timeout %s: must be positive", o.timeout)
			}
			if err := r.kube.connect(); err != nil {
				return err
			}
			run, step, err := r.waitingApproval(cmd.Context(), args[0], o.step)
			if err != nil {
				return err
			}
			return r.answer(cmd.Context(), run, step, o)
		},
	}
	cmd.Flags().StringVar(&o.reason, "reason", "", "why, recorded in the run (required)")
	cmd.Flags().StringVar(&o.step, "step", "", "the approval step to answer, when it is not the one the run waits at")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the operator to count the answer")
	return cmd
}

// waitingApproval finds the run arg names that waits at an approval step (the one named, if any).
func (r *root) waitingApproval(ctx context.Context, arg, stepName string) (*v1alpha1.TeardownRun, *v1alpha1.Step, error) {
	runs, err := r.kube.findRuns(ctx, arg)
	if err != nil {
		return nil, nil, err
	}
	for i := len(runs) - 1; i >= 0; i-- {
		run := &runs[i]
		if run.Status.Phase.Finished() {
			continue
		}
		name := stepName
		if name == "" {
			name = run.Status.CurrentStep
		}
		ss := run.Status.Step(name)
		for j := range run.Spec.Pipeline.Steps {
			s := &run.Spec.Pipeline.Steps[j]
			if s.Name != name || s.Approval == nil || ss == nil || ss.Phase != v1alpha1.StepRunning {
				continue
			}
			if ss.RetryTime != nil {
				// Between attempts: the last was rejected (or failed); the next one asks anew.
				return nil, nil, usageError("attempt %d of step %s ended (%s); attempt %d asks at %s: answer then",
					ss.Attempts, name, firstLineOf(ss.Message), ss.Attempts+1, ss.RetryTime.UTC().Format(time.RFC3339))
			}
			return run, s, nil
		}
	}
	run := &runs[len(runs)-1]
	if stepName != "" {
		return nil, nil, usageError("run %s/%s does not wait at an approval step %s: it is %s at step %s", run.Namespace, run.Name, stepName, phaseOf(run), run.Status.CurrentStep)
	}
	return nil, nil, usageError("run %s/%s waits for no approval: it is %s at step %s", run.Namespace, run.Name, phaseOf(run), run.Status.CurrentStep)
}

// answer checks who you are and that you may answer, creates your TeardownApproval, and waits
// for the operator to count it.
func (r *root) answer(ctx context.Context, run *v1alpha1.TeardownRun, step *v1alpha1.Step, o *answerOptions) error {
	me, err := r.kube.whoAmI(ctx)
	if err != nil {
		return err
	}
	if err := mayAnswer(ctx, r.kube.client, run, step, me); err != nil {
		return err
	}
	attempt := run.Status.Step(step.Name).Attempts
	ta := approval.Answer(run, step.Name, attempt, o.decision, o.reason, me)
	if err := r.kube.client.Create(ctx, ta, client.FieldOwner("kubectl-teardown")); apierrors.IsAlreadyExists(err) {
		return usageError("you (%s) already answered attempt %d of step %s (teardownapproval %s/%s): an answer cannot change", me.Username, attempt, step.Name, ta.Namespace, ta.Name)
	} else if err != nil {
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("the API server refused the answer, nothing was recorded: %v", apiError(err))}
	}
	verb := map[v1alpha1.ApprovalDecision]string{v1alpha1.Approve: "approves", v1alpha1.Reject: "rejects"}[o.decision]
	fmt.Fprintf(r.streams.Out, "teardownapproval %s/%s created: %s %s step %s of run %s (attempt %d): %s\n", ta.Namespace, ta.Name, me.Username, verb, step.Name, run.Name, attempt, o.reason)
	if op := r.kube.operator(ctx); op.down() {
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("not counted yet: %s; the operator counts the answer once it is back", op)}
	}
	return r.awaitCounted(ctx, run, step.Name, ta.Name, o.timeout)
}

// whoAmI asks the API server who the user is (a SelfSubjectReview).
func (k *kube) whoAmI(ctx context.Context) (v1alpha1.Approver, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := k.client.Create(ctx, review); err != nil {
		return v1alpha1.Approver{}, &ExitError{Code: ExitFindings, Err: fmt.Errorf("cannot ask the API server who you are (a SelfSubjectReview): %v", err)}
	}
	u := review.Status.UserInfo
	return v1alpha1.Approver{Username: u.Username, UID: u.UID, Groups: u.Groups}, nil
}

// mayAnswer refuses, before anything is written, an answer that would not count: from someone
// the step does not name, or whom RBAC does not let approve the run.
func mayAnswer(ctx context.Context, c client.Client, run *v1alpha1.TeardownRun, step *v1alpha1.Step, me v1alpha1.Approver) error {
	if ap := step.Approval.Approvers; ap != nil && !slices.Contains(ap.Users, me.Username) &&
		!slices.ContainsFunc(me.Groups, func(g string) bool { return slices.Contains(ap.Groups, g) }) {
		return usageError("you (%s, groups %s) are not among the approvers of step %s (%s): your answer would not count",
			me.Username, strings.Join(me.Groups, ", "), step.Name, approval.Describe(ap))
	}
	ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: approval.Access(run)}}
	if err := c.Create(ctx, ssar); err != nil {
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("cannot ask the API server whether you may approve (a SelfSubjectAccessReview): %v", err)}
	}
	if !ssar.Status.Allowed {
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("you (%s) may not approve or reject run %s in namespace %s: that takes RBAC verb %q on resource \"teardownruns\" (API group %s), "+
			"for example a RoleBinding to the ClusterRole teardown-operator-approver in that namespace; nothing was recorded", me.Username, run.Name, run.Namespace, v1alpha1.ApproveVerb, v1alpha1.Group)}
	}
	return nil
}

// awaitCounted polls the run until the operator has counted the answer, or ignored it.
func (r *root) awaitCounted(ctx context.Context, run *v1alpha1.TeardownRun, step, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key := client.ObjectKeyFromObject(run)
	var ignored string
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		if err := r.kube.client.Get(ctx, key, run); err != nil {
			return false, apiError(err)
		}
		ss := run.Status.Step(step)
		if ss == nil || ss.Approval == nil {
			return false, nil
		}
		if i := slices.IndexFunc(ss.Approval.Ignored, func(s string) bool { return strings.HasPrefix(s, name+": ") }); i >= 0 {
			ignored = ss.Approval.Ignored[i]
			return true, nil
		}
		return slices.ContainsFunc(ss.Approval.Decisions, func(d v1alpha1.ApprovalRecord) bool { return d.Approval == name }), nil
	})
	switch {
	case wait.Interrupted(err):
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("the operator has not counted the answer within %s (%s); it does when it next looks at the run",
			timeout, r.kube.operator(context.WithoutCancel(ctx)))}
	case err != nil:
		return err
	case ignored != "":
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("the operator ignored the answer: %s", strings.TrimPrefix(ignored, name+": "))}
	}
	ss := run.Status.Step(step)
	fmt.Fprintf(r.streams.Out, "counted: step %s is %s: %s\n", step, ss.Phase, firstLineOf(ss.Message))
	return nil
}
