package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// pollInterval is how often retry and abandon look for the operator's answer.
const pollInterval = 500 * time.Millisecond

func (r *root) retryCommand() *cobra.Command {
	var reason string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "retry RUN | KIND/NAME",
		Short: "Resume a Failed run from its failed step",
		Long: `Asks the operator to resume a Failed run that keeps its object, at the step that failed (steps that
succeeded are not run again), by annotating the run ` + v1alpha1.AnnotationRetry + `. Fix the cause
first. Then waits for the operator's answer and prints it.`,
		Example:           `  kubectl teardown retry manageddatabase/orders -n shop --reason "bucket policy fixed"`,
		Args:              exactArgs(1, "one RUN or KIND/NAME"),
		ValidArgsFunction: r.completeRuns,
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usageError("--timeout %s: must be positive", timeout)
			}
			if err := r.kube.connect(); err != nil {
				return err
			}
			run, err := r.failedRun(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if reason == "" {
				reason = "kubectl teardown retry"
			}
			return r.retry(cmd.Context(), run, reason, timeout)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the retry, recorded in the run's status.lastRetry")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the operator's answer")
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
		if run.Status.Phase == v1alpha1.RunFailed && !run.Status.Phase.Releases(run.Spec.Pipeline.FailurePolicy) {
			return run, nil
		}
	}
	run := &runs[len(runs)-1]
	return nil, usageError("run %s/%s is %s: only a Failed run that keeps its object can be retried", run.Namespace, run.Name, phaseOf(run))
}

// retry annotates the run and waits for the operator to take the annotation away.
func (r *root) retry(ctx context.Context, run *v1alpha1.TeardownRun, reason string, timeout time.Duration) error {
	patch := client.MergeFrom(run.DeepCopy())
	if run.Annotations == nil {
		run.Annotations = map[string]string{}
	}
	run.Annotations[v1alpha1.AnnotationRetry] = reason
	if err := r.kube.client.Patch(ctx, run, patch, client.FieldOwner("kubectl-teardown")); err != nil {
		return apiError(err)
	}
	out := r.streams.Out
	fmt.Fprintf(out, "teardownrun %s/%s annotated %s=%q\n", run.Namespace, run.Name, v1alpha1.AnnotationRetry, reason)
	before := run.Status.Retries
	key := client.ObjectKeyFromObject(run)
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		if err := r.kube.client.Get(ctx, key, run); err != nil {
			return false, apiError(err)
		}
		return run.Annotations[v1alpha1.AnnotationRetry] == "", nil
	})
	if wait.Interrupted(err) {
		fmt.Fprintf(out, "the operator has not answered within %s (is it running?); the run will be retried when it does\n", timeout)
		return nil
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
	fmt.Fprintf(out, "retry %d accepted: the run resumed%s and is %s\n", run.Status.Retries, from, phaseOf(run))
	return nil
}
