package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

func (r *root) abandonCommand() *cobra.Command {
	var reason string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "abandon KIND/NAME --reason \"...\"",
		Short: "Break glass: let an object go without finishing its teardown",
		Long: `Annotates the object ` + v1alpha1.AnnotationAbandon + `="<you>: <reason>": its runs skip their remaining
steps, are marked Abandoned, and release the object, whose deletion then completes. The reason
is required and recorded, with who you are, in each run's status.abandonedBy. Abandoning a
teardown deletes the object without its cleanup, so it takes RBAC verb delete on the object.
Prints the runs' resulting phase.

` + requestsDoc,
		Example:           `  kubectl teardown abandon manageddatabase/orders -n shop --reason "INC-4211: provider API down, snapshot taken by hand"`,
		Args:              exactArgs(1, "one KIND/NAME"),
		ValidArgsFunction: r.completeTargets,
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usageError("--reason is required: say why you break glass; it is recorded in the run, with who you are")
			}
			if timeout <= 0 {
				return usageError("--timeout %s: must be positive", timeout)
			}
			if err := r.kube.connect(); err != nil {
				return err
			}
			return r.abandon(cmd.Context(), args[0], reason, timeout)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why you break glass (required)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the runs to be abandoned")
	return cmd
}

func (r *root) abandon(ctx context.Context, arg, reason string, timeout time.Duration) error {
	t, err := r.kube.getTarget(ctx, arg)
	if err != nil {
		return err
	}
	obj := t.Object
	if reason, err = r.kube.requestValue(ctx, reason); err != nil {
		return err
	}
	patch := client.MergeFrom(obj.DeepCopy())
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[v1alpha1.AnnotationAbandon] = reason
	obj.SetAnnotations(ann)
	if err := r.kube.client.Patch(ctx, obj, patch, client.FieldOwner("kubectl-teardown")); err != nil {
		return apiError(err)
	}
	out := r.streams.Out
	fmt.Fprintf(out, "%s annotated %s=%q\n", describeObject(t.GVK.Kind, obj), v1alpha1.AnnotationAbandon, reason)
	if obj.GetDeletionTimestamp() == nil {
		fmt.Fprintln(out, "the object is not being deleted: when it is, its teardown is abandoned at once and the object released;")
		fmt.Fprintln(out, "a delete request in flight (trigger DeleteRequest) is cancelled and the object's veto lifted, so that kubectl delete releases it")
		return nil
	}
	if op := r.kube.operator(ctx); op.down() {
		// The annotation waits for the operator; only drain releases the object without it.
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("nothing is abandoned yet: %s; the annotation takes effect once it is back. To release the object now without it: kubectl teardown drain --policy %s",
			op, drainPolicy(teardownFinalizers(obj.GetFinalizers()), obj.GetNamespace()))}
	}
	var runs []v1alpha1.TeardownRun
	uid := obj.GetUID()
	err = wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		runs, err = r.kube.runsOf(ctx, uid, obj.GetNamespace())
		// A Failed run that keeps its object is finished already: it is done once it let go.
		return err == nil && allFinished(runs) && !slices.ContainsFunc(runs, keepsObject), err
	})
	for i := range runs {
		fmt.Fprintf(out, "teardownrun %s/%s is %s\n", runs[i].Namespace, runs[i].Name, phaseOf(&runs[i]))
	}
	switch {
	case wait.Interrupted(err) && len(runs) > 0:
		fmt.Fprintf(out, "not every run finished within %s (%s)\n", timeout, r.kube.operator(ctx))
	case err != nil && !wait.Interrupted(err):
		return err
	}
	return nil
}
