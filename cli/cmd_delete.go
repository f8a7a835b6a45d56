package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

type deleteOptions struct {
	reason   string
	withdraw bool
	wait     bool
	timeout  time.Duration
}

func (r *root) deleteCommand() *cobra.Command {
	o := &deleteOptions{}
	cmd := &cobra.Command{
		Use:   "delete KIND/NAME --reason \"...\"",
		Short: "Request the deletion of an object whose teardown runs before the DELETE (trigger DeleteRequest)",
		Long: `Objects protected by a policy with spec.trigger DeleteRequest refuse a plain kubectl delete: their
pipeline runs while they are alive, and the operator deletes them once it succeeded. This command
requests that, by annotating the object ` + v1alpha1.AnnotationDeleteRequested + `="<you>: <reason>" (recorded
in each run's status.requestedBy), then waits until the object is gone and prints each run's
outcome. Requesting a deletion takes RBAC verb delete on the object, as deleting it would.
` + requestsDoc + `

If a pipeline fails the object stays as it was: fix the cause and run kubectl teardown retry, or
withdraw the request with --withdraw, which cancels the runs not finished. Requesting again after
that starts the pipelines over from their first step.

Exits 0 once the object is gone (or, with --wait=false, once the request is recorded), 1 when a
run failed or was cancelled or the wait timed out, 2 on bad input.`,
		Example: `  kubectl teardown delete kafkatopic.kafka.strimzi.io/orders -n shop --reason "topic retired, INC-4312"
  kubectl teardown delete bucket.s3.services.k8s.aws/assets -n shop --withdraw`,
		Args:              exactArgs(1, "one KIND/NAME"),
		ValidArgsFunction: r.completeTargets,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case o.withdraw && o.reason != "":
				return usageError("--withdraw takes no --reason: it removes the request")
			case !o.withdraw && strings.TrimSpace(o.reason) == "":
				return usageError("--reason is required: say why; it is recorded in the runs, with who you are")
			case o.timeout <= 0:
				return usageError("--timeout %s: must be positive", o.timeout)
			}
			if err := r.kube.connect(); err != nil {
				return err
			}
			return r.requestDelete(cmd.Context(), args[0], o)
		},
	}
	cmd.Flags().StringVar(&o.reason, "reason", "", "why (required unless --withdraw)")
	cmd.Flags().BoolVar(&o.withdraw, "withdraw", false, "withdraw the request: cancel the runs not finished, keep the object")
	cmd.Flags().BoolVar(&o.wait, "wait", true, "wait until the object is gone or a run fails")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait")
	return cmd
}

func (r *root) requestDelete(ctx context.Context, arg string, o *deleteOptions) error {
	t, err := r.kube.getTarget(ctx, arg)
	if err != nil {
		return err
	}
	obj := t.Object
	if err := r.twoPhasePolicies(ctx, t); err != nil {
		return err
	}
	out := r.streams.Out
	// Runs cancelled by a withdrawn request start over on this one: they are not its outcome.
	restarts, err := r.cancelledRuns(ctx, t)
	if err != nil {
		return err
	}
	current, requested := obj.GetAnnotations()[v1alpha1.AnnotationDeleteRequested]
	switch {
	case o.withdraw && !requested:
		fmt.Fprintf(out, "%s has no delete request\n", describeObject(t.GVK.Kind, obj))
		return nil
	case requested && !o.withdraw:
		fmt.Fprintf(out, "%s: deletion already requested (%q)\n", describeObject(t.GVK.Kind, obj), current)
	default:
		patch := client.MergeFrom(obj.DeepCopy())
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		if o.withdraw {
			delete(ann, v1alpha1.AnnotationDeleteRequested)
		} else {
			if o.reason, err = r.kube.requestValue(ctx, o.reason); err != nil {
				return err
			}
			ann[v1alpha1.AnnotationDeleteRequested] = o.reason
		}
		obj.SetAnnotations(ann)
		if err := r.kube.client.Patch(ctx, obj, patch, client.FieldOwner("kubectl-teardown")); err != nil {
			return apiError(err)
		}
		if o.withdraw {
			fmt.Fprintf(out, "%s: delete request withdrawn; runs not finished are cancelled, the object stays\n", describeObject(t.GVK.Kind, obj))
			return nil
		}
		fmt.Fprintf(out, "%s annotated %s=%q\n", describeObject(t.GVK.Kind, obj), v1alpha1.AnnotationDeleteRequested, o.reason)
		for _, run := range restarts {
			fmt.Fprintf(out, "teardownrun %s/%s was cancelled (%s): this request starts it over from its first step\n",
				run.Namespace, run.Name, run.Status.CancelledBy)
		}
	}
	if op := r.kube.operator(ctx); op.down() {
		// The request waits for the operator: waiting here would only run out the timeout.
		msg := fmt.Sprintf("nothing is deleted yet: %s; the request is acted on once it is back", op)
		if !o.wait {
			fmt.Fprintln(r.streams.ErrOut, "warning: "+msg)
			return nil
		}
		return &ExitError{Code: ExitFindings, Err: errors.New(msg)}
	}
	if !o.wait {
		return nil
	}
	return r.waitDeleted(ctx, t, restarts, o.timeout)
}

// cancelledRuns returns the object's cancelled runs, which a new request starts over: each with
// the retries it counts, which the restart increments.
func (r *root) cancelledRuns(ctx context.Context, t *target) (map[string]v1alpha1.TeardownRun, error) {
	runs, err := r.kube.runsOf(ctx, t.Object.GetUID(), t.Object.GetNamespace())
	if err != nil {
		return nil, err
	}
	out := map[string]v1alpha1.TeardownRun{}
	for _, run := range runs {
		if run.Status.Phase == v1alpha1.RunCancelled {
			out[run.Namespace+"/"+run.Name] = run
		}
	}
	return out, nil
}

// twoPhasePolicies checks that a policy with trigger DeleteRequest protects the object: a request
// on any other object would wait for nothing.
func (r *root) twoPhasePolicies(ctx context.Context, t *target) error {
	policies, err := r.kube.policiesFor(ctx, t)
	if err != nil {
		return err
	}
	fins := t.Object.GetFinalizers()
	for _, v := range policies {
		if v.Spec.Trigger == v1alpha1.TriggerDeleteRequest && slices.Contains(fins, naming.Finalizer(v.Key.Kind, v.Key.Name)) {
			return nil
		}
	}
	return usageError("%s is not protected by a policy with trigger DeleteRequest: delete it with kubectl delete (a policy with trigger Finalizer runs its pipeline after the DELETE)",
		describeObject(t.GVK.Kind, t.Object))
}

// waitDeleted follows the object's runs until it is gone, a run fails or is cancelled, or timeout.
// restarts are the runs that were cancelled when the request was made: the operator starts them
// over (their retries grow), and until it does their Cancelled phase is not this request's outcome.
func (r *root) waitDeleted(ctx context.Context, t *target, restarts map[string]v1alpha1.TeardownRun, timeout time.Duration) error {
	obj, out := t.Object, r.streams.Out
	var runs []v1alpha1.TeardownRun
	var stopped *v1alpha1.TeardownRun
	gone := false
	reported := map[string]bool{}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if runs, err = r.kube.runsOf(ctx, obj.GetUID(), obj.GetNamespace()); err != nil {
			return false, err
		}
		for i := range runs {
			run := &runs[i]
			key := run.Namespace + "/" + run.Name
			if before, ok := restarts[key]; ok {
				if run.Status.Retries == before.Status.Retries {
					continue // not started over yet
				}
				if !reported[key] {
					reported[key] = true
					fmt.Fprintf(out, "teardownrun %s started over from step %s (retry %d)\n", key, restartStep(run), run.Status.Retries)
				}
			}
			if ph := run.Status.Phase; ph == v1alpha1.RunCancelled || ph == v1alpha1.RunFailed && !ph.Releases(run.Spec.Pipeline.FailurePolicy) {
				stopped = run
				return true, nil
			}
		}
		live := obj.DeepCopy()
		err = r.kube.client.Get(ctx, client.ObjectKeyFromObject(obj), live)
		gone = apierrors.IsNotFound(err) || err == nil && live.GetUID() != obj.GetUID()
		return gone, client.IgnoreNotFound(err)
	})
	for i := range runs {
		fmt.Fprintf(out, "teardownrun %s/%s is %s\n", runs[i].Namespace, runs[i].Name, phaseOf(&runs[i]))
	}
	arg := withNamespace(strings.ToLower(t.GVK.Kind)+"/"+obj.GetName(), obj.GetNamespace())
	switch {
	case gone:
		fmt.Fprintf(out, "%s deleted\n", describeObject(t.GVK.Kind, obj))
		return nil
	case stopped != nil:
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("teardownrun %s/%s is %s: %s; the object stays (kubectl teardown status %s)",
			stopped.Namespace, stopped.Name, stopped.Status.Phase, stopped.Status.Message, arg)}
	case wait.Interrupted(err):
		why := "its pipeline goes on"
		if st := r.kube.operator(ctx); st.down() {
			why = "nothing acts on it: " + strings.TrimPrefix(st.String(), "operator: ")
		} else if !st.Known {
			why += " (is the operator running? " + st.Why + ")"
		}
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("%s is still there after %s: %s (kubectl teardown status %s)",
			describeObject(t.GVK.Kind, obj), timeout, why, arg)}
	}
	return err
}

// restartStep is the step a restarted run started over from.
func restartStep(run *v1alpha1.TeardownRun) string {
	if lr := run.Status.LastRetry; lr != nil {
		return lr.FromStep
	}
	return run.Status.CurrentStep
}
