package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	policy        string
}

func (r *root) statusCommand() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status [RUN | KIND/NAME | --policy KIND/NAME]",
		Short: "Show teardowns in flight, one run or object as a tree, or a policy's teardowns and runs",
		Long: `With no argument: the runs in flight and the stuck ones (Failed and keeping their object), oldest
first. With a run's name: the run as a tree of steps with phase, attempts, durations, message,
outputs, and a job step's Job with the tail of its log. With an object as KIND/NAME: the object
(not being deleted, being deleted and held by which finalizers, or gone) and every kept run of it
as a tree, also once the object is gone. With --policy: the policy's last teardowns (kept as runs
or not), then every kept run of it, newest first.
Says so when the operator's lease shows that no replica is running.

-o wide never truncates; -o json|yaml prints the run, or a List of runs. --watch prints again on
every change, redrawing in place on a terminal: for a run until it finishes; for an object until
its runs have finished and it is gone or they leave it in place, exiting 0 when every run
succeeded and 1 otherwise; with no argument or --policy until interrupted.`,
		Example: `  kubectl teardown status -A
  kubectl teardown status manageddatabase/orders -n shop --watch
  kubectl teardown status --policy TeardownPolicy/database-dump-job -n shop`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: r.completeRuns,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(args); err != nil {
				return err
			}
			if err := r.kube.connect(); err != nil {
				return err
			}
			return r.status(cmd.Context(), args, o)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: wide, json or yaml")
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "runs of every namespace")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "print again on every change, until the teardown ends")
	cmd.Flags().DurationVar(&o.interval, "interval", 2*time.Second, "how often --watch looks")
	cmd.Flags().StringVar(&o.policy, "policy", "", "one policy's last teardowns and its runs: TeardownPolicy/NAME (in -n), ClusterTeardownPolicy/NAME, or NAME")
	_ = cmd.RegisterFlagCompletionFunc("policy", r.completePolicies)
	return cmd
}

func (o *statusOptions) validate(args []string) error {
	switch o.output {
	case "", "wide", "json", "yaml":
	default:
		return usageError("--output %q: must be wide, json or yaml", o.output)
	}
	switch {
	case o.interval <= 0:
		return usageError("--interval %s: must be positive", o.interval)
	case o.policy != "" && len(args) > 0:
		return usageError("--policy lists a policy's runs: give no RUN or KIND/NAME with it")
	case o.policy != "" && o.allNamespaces:
		return usageError("--policy lists a policy's runs wherever they are: -A adds nothing")
	}
	return nil
}

// statusLook is what one look at the cluster found: one frame of status.
type statusLook struct {
	runs []v1alpha1.TeardownRun
	// policy is the status of the policy status --policy follows.
	policy *v1alpha1.TeardownPolicyStatus
	// object is what was found of the object status KIND/NAME follows.
	object   *objectLook
	operator operatorState
	// single: the look is of one run or object, whose only run JSON and YAML print alone.
	single bool
	// ended: --watch stops after this frame, returning outcome.
	ended   bool
	outcome error
}

// looker makes one look; each kind of status has its own.
type looker func(ctx context.Context) (*statusLook, error)

// status prints once or, with --watch, each time what it shows changes, until the teardown
// ends or the user interrupts it.
func (r *root) status(ctx context.Context, args []string, o *statusOptions) error {
	look, print, err := r.statusLooker(ctx, args, o)
	if err != nil {
		return err
	}
	screen := newFrames(r.streams.Out, o.output)
	lastNote := ""
	for {
		l, err := look(ctx)
		if err != nil {
			return err
		}
		l.operator = r.kube.operator(ctx)
		var b strings.Builder
		if err := r.renderStatus(ctx, &b, l, o, print); err != nil {
			return err
		}
		screen.show(b.String())
		if note := operatorNote(l); o.output == "json" || o.output == "yaml" {
			if note != "" && note != lastNote {
				fmt.Fprintln(r.streams.ErrOut, "note: "+note) // stdout stays one valid object or List
			}
			lastNote = note
		}
		if !o.watch {
			return nil
		}
		if l.ended {
			return l.outcome
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.interval):
		}
	}
}

// statusLooker picks what status looks at, and how it prints in text.
func (r *root) statusLooker(ctx context.Context, args []string, o *statusOptions) (looker, func(context.Context, io.Writer, *statusLook), error) {
	wide := o.output == "wide"
	switch {
	case o.policy != "":
		key, _, err := r.resolvePolicy(ctx, o.policy)
		if err != nil {
			return nil, nil, err
		}
		look := func(ctx context.Context) (*statusLook, error) {
			v, err := r.kube.getPolicy(ctx, key)
			if err != nil {
				return nil, err
			}
			l := &statusLook{}
			if v != nil {
				l.policy = v.Status
			}
			l.runs, err = r.kube.runsOfPolicy(ctx, key)
			return l, err
		}
		return look, func(_ context.Context, w io.Writer, l *statusLook) {
			printPolicyHistory(w, key.String(), l.policy, wide)
			printPolicyRuns(w, key.String(), l.runs, wide)
		}, nil
	case len(args) == 0:
		look := func(ctx context.Context) (*statusLook, error) {
			runs, err := r.runsInFlight(ctx, o.allNamespaces)
			return &statusLook{runs: runs}, err
		}
		return look, func(_ context.Context, w io.Writer, l *statusLook) { printRunTable(w, l.runs, wide, o.allNamespaces) }, nil
	case isRunArg(args[0]):
		return r.runLooker(args[0]), r.printTrees(wide), nil
	}
	f, err := r.kube.resolveFollowed(args[0])
	if err != nil {
		return nil, nil, err
	}
	look := func(ctx context.Context) (*statusLook, error) {
		ol, err := f.look(ctx, r.kube)
		if err != nil {
			return nil, err
		}
		l := &statusLook{runs: ol.runs, object: ol, single: true, ended: ol.ended()}
		if l.ended {
			l.outcome = outcome(ol.runs)
		}
		return l, nil
	}
	trees := r.printTrees(wide)
	return look, func(ctx context.Context, w io.Writer, l *statusLook) {
		l.object.print(w, f, l.operator)
		trees(ctx, w, l)
	}, nil
}

// runLooker reads one run; its watch ends when the run has finished. A run deleted while it is
// followed (retention) ends the watch with an error.
func (r *root) runLooker(arg string) looker {
	key := client.ObjectKey{Namespace: r.kube.namespace(), Name: runName(arg)}
	seen := false
	return func(ctx context.Context) (*statusLook, error) {
		var run v1alpha1.TeardownRun
		if err := r.kube.client.Get(ctx, key, &run); err != nil {
			if seen && apierrors.IsNotFound(err) {
				return nil, &ExitError{Code: ExitFindings, Err: fmt.Errorf("teardownrun %s was deleted while followed", key)}
			}
			return nil, apiError(err)
		}
		seen = true
		l := &statusLook{runs: []v1alpha1.TeardownRun{run}, single: true, ended: run.Status.Phase.Finished()}
		if l.ended {
			l.outcome = outcome(l.runs)
		}
		return l, nil
	}
}

// runsInFlight lists the runs in flight and the stuck ones, oldest first.
func (r *root) runsInFlight(ctx context.Context, allNamespaces bool) ([]v1alpha1.TeardownRun, error) {
	var list v1alpha1.TeardownRunList
	var opts []client.ListOption
	if !allNamespaces {
		opts = append(opts, client.InNamespace(r.kube.namespace()))
	}
	if err := r.kube.client.List(ctx, &list, opts...); err != nil {
		return nil, apiError(err)
	}
	out := []v1alpha1.TeardownRun{}
	for _, run := range list.Items {
		if !run.Status.Phase.Finished() || keepsObject(run) && run.Status.Phase == v1alpha1.RunFailed {
			out = append(out, run)
		}
	}
	sortRuns(out)
	return out, nil
}

// printTrees prints each run of a look as a tree.
func (r *root) printTrees(wide bool) func(context.Context, io.Writer, *statusLook) {
	return func(ctx context.Context, w io.Writer, l *statusLook) {
		for i := range l.runs {
			r.printRunTree(ctx, w, &l.runs[i], wide)
		}
	}
}

// renderStatus writes one frame: the runs as data, or as text with what the operator's lease
// says when it matters.
func (r *root) renderStatus(ctx context.Context, w io.Writer, l *statusLook, o *statusOptions, print func(context.Context, io.Writer, *statusLook)) error {
	if o.output == "json" || o.output == "yaml" {
		runs := l.runs
		for i := range runs {
			runs[i].ManagedFields = nil
			runs[i].SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("TeardownRun"))
		}
		var v any = &v1alpha1.TeardownRunList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: runs}
		if l.single && len(runs) == 1 {
			v = runs[0]
		}
		return r.printTo(w, v, o.output)
	}
	print(ctx, w, l)
	if note := operatorNote(l); note != "" {
		fmt.Fprintln(w, note)
	}
	return nil
}
