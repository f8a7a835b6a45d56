package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// statusOptions are status's flags.
type statusOptions struct {
	output        string
	allNamespaces bool
	watch         bool
	interval      time.Duration
}

func (r *root) statusCommand() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status [RUN | KIND/NAME]",
		Short: "Show teardowns in flight, or one run as a tree",
		Long: `With no argument: the runs in flight and the stuck ones (Failed and keeping their object), oldest
first. With a run's name, or an object as KIND/NAME: the run as a tree of steps with phase,
attempts, durations, message, outputs, and a job step's Job with the tail of its log.
-o wide never truncates; -o json|yaml prints the run, or a List of runs; --watch prints again on
every change: for a run or an object until its runs finish, with no argument until interrupted.`,
		Example: `  kubectl teardown status -A
  kubectl teardown status manageddatabase/orders -n shop --watch`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: r.completeRuns,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch o.output {
			case "", "wide", "json", "yaml":
			default:
				return usageError("--output %q: must be wide, json or yaml", o.output)
			}
			if o.interval <= 0 {
				return usageError("--interval %s: must be positive", o.interval)
			}
			if err := r.kube.connect(); err != nil {
				return err
			}
			return r.status(cmd.Context(), args, o)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: wide, json or yaml")
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "runs of every namespace")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "print again on every change, until the runs finish")
	cmd.Flags().DurationVar(&o.interval, "interval", 2*time.Second, "how often --watch looks")
	return cmd
}

// status prints once, or with --watch each time what it would print changes.
func (r *root) status(ctx context.Context, args []string, o *statusOptions) error {
	last := ""
	for {
		runs, err := r.statusRuns(ctx, args, o)
		if err != nil {
			return err
		}
		var b strings.Builder
		if err := r.renderStatus(ctx, &b, runs, args, o); err != nil {
			return err
		}
		if b.String() != last {
			if last != "" {
				fmt.Fprintln(r.streams.Out, "---")
			}
			fmt.Fprint(r.streams.Out, b.String())
			last = b.String()
		}
		if !o.watch || len(args) > 0 && allFinished(runs) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.interval):
		}
	}
}

func (r *root) statusRuns(ctx context.Context, args []string, o *statusOptions) ([]v1alpha1.TeardownRun, error) {
	if len(args) == 1 {
		return r.kube.findRuns(ctx, args[0])
	}
	var list v1alpha1.TeardownRunList
	var opts []client.ListOption
	if !o.allNamespaces {
		opts = append(opts, client.InNamespace(r.kube.namespace()))
	}
	if err := r.kube.client.List(ctx, &list, opts...); err != nil {
		return nil, apiError(err)
	}
	var out []v1alpha1.TeardownRun
	for _, run := range list.Items {
		if !run.Status.Phase.Finished() || run.Status.Phase == v1alpha1.RunFailed && !run.Status.Phase.Releases(run.Spec.Pipeline.FailurePolicy) {
			out = append(out, run)
		}
	}
	sortRuns(out)
	return out, nil
}

func (r *root) renderStatus(ctx context.Context, w io.Writer, runs []v1alpha1.TeardownRun, args []string, o *statusOptions) error {
	if o.output == "json" || o.output == "yaml" {
		for i := range runs {
			runs[i].ManagedFields = nil
			runs[i].SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("TeardownRun"))
		}
		var v any = &v1alpha1.TeardownRunList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: runs}
		if len(args) == 1 && len(runs) == 1 {
			v = runs[0]
		}
		return r.printTo(w, v, o.output)
	}
	if len(args) == 0 {
		printRunTable(w, runs, o.output == "wide", o.allNamespaces)
		return nil
	}
	for i := range runs {
		r.printRunTree(ctx, w, &runs[i], o.output == "wide")
	}
	return nil
}

func allFinished(runs []v1alpha1.TeardownRun) bool {
	for _, run := range runs {
		if !run.Status.Phase.Finished() {
			return false
		}
	}
	return true
}

func printRunTable(w io.Writer, runs []v1alpha1.TeardownRun, wide, allNamespaces bool) {
	if len(runs) == 0 {
		fmt.Fprintln(w, "No teardown in flight or stuck.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if allNamespaces {
		fmt.Fprint(tw, "NAMESPACE\t")
	}
	fmt.Fprintln(tw, "NAME\tTARGET\tPOLICY\tPHASE\tSTEP\tAGE\tMESSAGE")
	for i := range runs {
		run := &runs[i]
		if allNamespaces {
			fmt.Fprintf(tw, "%s\t", run.Namespace)
		}
		msg := run.Status.Message
		if !wide {
			msg = truncate(firstLineOf(msg), tableMessage)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", run.Name, targetOf(run), policyOf(run), phaseOf(run),
			run.Status.CurrentStep, age(time.Since(run.CreationTimestamp.Time)), msg)
	}
	_ = tw.Flush()
}

func targetOf(run *v1alpha1.TeardownRun) string {
	t := run.Spec.Target
	if t.Namespace != "" {
		return fmt.Sprintf("%s %s/%s", t.Kind, t.Namespace, t.Name)
	}
	return t.Kind + " " + t.Name
}

func policyOf(run *v1alpha1.TeardownRun) string {
	p := run.Spec.PolicyRef
	return policyKeyString(p.Kind, p.Namespace, p.Name)
}

func phaseOf(run *v1alpha1.TeardownRun) string {
	if run.Status.Phase == "" {
		return "Pending"
	}
	return string(run.Status.Phase)
}

// Widths of messages in output that is not wide.
const (
	tableMessage = 60
	runMessage   = 200
	stepMessage  = 160
	outputValue  = 120
)

// truncate cuts s to n runes at most, marking the cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}
