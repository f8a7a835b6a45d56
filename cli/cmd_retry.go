package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// pollInterval is how often retry and abandon look for the operator's answer.
const pollInterval = 500 * time.Millisecond

// retryOptions are retry's flags.
type retryOptions struct {
	reason  string
	wait    bool
	timeout time.Duration
}

func (r *root) retryCommand() *cobra.Command {
	o := &retryOptions{}
	cmd := &cobra.Command{
		Use:   "retry RUN | KIND/NAME",
		Short: "Resume a Failed run from its failed step",
		Long: `Asks the operator to resume a Failed run that keeps its object, at the step that failed (steps that
succeeded are not run again), by annotating the run ` + v1alpha1.AnnotationRetry + `. Fix the cause
first. Then waits for the operator's answer and, unless --wait=false, follows the run to its end.
` + requestsDoc + `

Exits 0 once the run succeeded (with --wait=false, once the operator accepted the retry and the
run goes on), 1 when the operator refused the retry, the run failed again, or the wait timed
out, 2 on bad input or a run that is not Failed.`,
		Example:           `  kubectl teardown retry manageddatabase/orders -n shop --reason "bucket policy fixed"`,
		Args:              exactArgs(1, "one RUN or KIND/NAME"),
		ValidArgsFunction: r.completeRuns,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.timeout <= 0 {
				return usageError("--timeout %s: must be positive", o.timeout)
			}
			if err := r.kube.connect(); err != nil {
				return err
			}
			run, err := r.failedRun(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if o.reason == "" {
				o.reason = "kubectl teardown retry"
			}
			return r.retry(cmd.Context(), run, o)
		},
	}
	cmd.Flags().StringVar(&o.reason, "reason", "", "why the retry, recorded in the run's status.lastRetry")
	cmd.Flags().BoolVar(&o.wait, "wait", true, "follow the retried run until it ends")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the operator's answer and, with --wait, for the run's end")
	return cmd
}

// failedRun finds the one run arg names that can be retried.
func (r *root) failedRun(ctx context.Context, arg string) (*v1alpha1.TeardownRun, error) {
	runs, err := r.kube.findRuns(ctx, arg)
	if err != nil {
		return nil, err
	}
	for i := range runs {
		run := &runs[i]
		if run.Status.Phase == v1alpha1.RunFailed && keepsObject(*run) {
			return run, nil
		}
	}
	run := &runs[len(runs)-1]
	return nil, usageError("run %s/%s is %s: only a Failed run that keeps its object can be retried", run.Namespace, run.Name, phaseOf(run))
}

// retry annotates the run, waits for the operator to take the annotation away, and follows the
// run it resumed.
func (r *root) retry(ctx context.Context, run *v1alpha1.TeardownRun, o *retryOptions) error {
	value, err := r.kube.requestValue(ctx, o.reason)
	if err != nil {
		return err
	}
	o.reason = value
	patch := client.MergeFrom(run.DeepCopy())
	if run.Annotations == nil {
		run.Annotations = map[string]string{}
	}
	run.Annotations[v1alpha1.AnnotationRetry] = o.reason
	if err := r.kube.client.Patch(ctx, run, patch, client.FieldOwner("kubectl-teardown")); err != nil {
		return apiError(err)
	}
	out := r.streams.Out
	fmt.Fprintf(out, "teardownrun %s/%s annotated %s=%q\n", run.Namespace, run.Name, v1alpha1.AnnotationRetry, o.reason)
	if op := r.kube.operator(ctx); op.down() {
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("nothing is retried yet: %s; the run is retried once it is back", op)}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	before := run.Status.Retries
	key := client.ObjectKeyFromObject(run)
	err = wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		if err := r.kube.client.Get(ctx, key, run); err != nil {
			return false, apiError(err)
		}
		return run.Annotations[v1alpha1.AnnotationRetry] == "", nil
	})
	if wait.Interrupted(err) {
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("the operator has not answered within %s (%s); the run is retried when it does",
			o.timeout, r.kube.operator(context.WithoutCancel(ctx)))}
	} else if err != nil {
		return err
	}
	if run.Status.Retries == before {
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("the operator refused the retry: %s (kubectl describe teardownrun -n %s %s)", run.Status.Message, run.Namespace, run.Name)}
	}
	from := ""
	if run.Status.LastRetry != nil {
		from = " from step " + run.Status.LastRetry.FromStep
	}
	fmt.Fprintf(out, "retry %d accepted: the run resumed%s\n", run.Status.Retries, from)
	if o.wait {
		err = r.followRetried(ctx, run)
	}
	return r.retryOutcome(run, err, o)
}

// followRetried polls the run until it has finished, printing each step it moves to.
func (r *root) followRetried(ctx context.Context, run *v1alpha1.TeardownRun) error {
	key, shown := client.ObjectKeyFromObject(run), ""
	return wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		if err := r.kube.client.Get(ctx, key, run); err != nil {
			return false, apiError(err)
		}
		if now := phaseOf(run) + " " + run.Status.CurrentStep; now != shown && !run.Status.Phase.Finished() {
			fmt.Fprintf(r.streams.Out, "teardownrun %s/%s is %s at step %s\n", run.Namespace, run.Name, phaseOf(run), run.Status.CurrentStep)
			shown = now
		}
		return run.Status.Phase.Finished(), nil
	})
}

// retryOutcome says how the retried run stands: succeeded, failed again (exit 1), going on, or
// still going on when the wait ran out (exit 1).
func (r *root) retryOutcome(run *v1alpha1.TeardownRun, followErr error, o *retryOptions) error {
	ref := fmt.Sprintf("teardownrun %s/%s", run.Namespace, run.Name)
	switch {
	case run.Status.Phase == v1alpha1.RunFailed:
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("%s failed again: %s (kubectl teardown status %s -n %s)",
			ref, firstLineOf(run.Status.Message), run.Name, run.Namespace)}
	case run.Status.Phase.Finished():
		fmt.Fprintf(r.streams.Out, "%s is %s: %s\n", ref, phaseOf(run), firstLineOf(run.Status.Message))
		return outcome([]v1alpha1.TeardownRun{*run})
	case followErr != nil && !wait.Interrupted(followErr) && !errors.Is(followErr, context.DeadlineExceeded):
		return followErr
	case o.wait:
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("%s is still %s at step %s after %s (kubectl teardown status %s -n %s --watch follows it)",
			ref, phaseOf(run), run.Status.CurrentStep, o.timeout, run.Name, run.Namespace)}
	}
	fmt.Fprintf(r.streams.Out, "%s is %s at step %s\n", ref, phaseOf(run), run.Status.CurrentStep)
	return nil
}
