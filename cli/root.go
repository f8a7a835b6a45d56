// Package cli is kubectl-teardown, the kubectl plugin for teardown-operator: lint and test
// policies offline (GitOps CI), plan a deletion, follow, retry and abandon runs, and drain the
// operator's finalizers. It runs the operator's own compiler and pipeline, so the two cannot
// disagree.
package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// Exit codes.
const (
	ExitOK = 0
	// ExitFindings: lint found problems, a test failed.
	ExitFindings = 1
	// ExitUsage: bad usage or input: unknown flag or kind, missing object or file, no permission.
	ExitUsage = 2
)

// ExitError ends the command with Code; Err, when set, is printed as a one-line error.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// usageError is an ExitUsage error.
func usageError(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// findings ends a command that printed its findings with ExitFindings, printing nothing more.
var findings = &ExitError{Code: ExitFindings}

// Version is the plugin's version, set at build time (-ldflags -X, as make plugin, make image and
// the release archives do). Unset, the module version Go recorded is used (go install ...@v0.1.0).
var Version = ""

// root is what every command shares: the streams and the kubeconfig flags.
type root struct {
	streams genericiooptions.IOStreams
	flags   *genericclioptions.ConfigFlags
	kube    *kube
}

// NewCommand returns the kubectl-teardown command.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	r := &root{streams: streams, flags: genericclioptions.NewConfigFlags(true)}
	cmd := &cobra.Command{
		Use:   "kubectl-teardown",
		Short: "Lint, test and plan teardown policies; follow, retry, request, abandon and drain teardowns",
		Long: `kubectl teardown works with teardown-operator's policies and runs.

Offline (no cluster), for GitOps CI:
  lint    check policies as the API server and the operator would, and flag risky ones
  test    run policies against TeardownTest fixtures with scripted answers

Against a cluster:
  plan     show what deleting an object would run, now, without running it
  status   show runs in flight, one run or object followed to its end, a policy's runs
  retry    resume a Failed run from its failed step, and follow it
  delete   request the deletion of an object whose pipeline runs before the DELETE (DeleteRequest)
  abandon  break glass: release an object without finishing its teardown
  drain    release every teardown finalizer (before uninstalling the operator)
  kinds    dump the cluster's kinds for lint --kinds`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl teardown"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError("%v (see %s --help)", err, c.CommandPath())
	})
	r.flags.AddFlags(cmd.PersistentFlags())
	r.kube = &kube{flags: r.flags}
	cmd.PersistentFlags().StringVar(&r.kube.runNamespace, "run-namespace", "teardown-system",
		"the operator's --run-namespace, where runs of cluster-scoped objects live")
	cmd.AddCommand(r.lintCommand(), r.testCommand(), r.planCommand(), r.statusCommand(), r.retryCommand(),
		r.abandonCommand(), r.deleteCommand(), r.drainCommand(), r.kindsCommand(), r.versionCommand(),
		r.approveCommand(), r.rejectCommand())
	return cmd
}

// Main runs the command and returns the process's exit code.
func Main() int {
	cmd := NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	return Run(cmd, os.Args[1:])
}

// Run executes cmd with args, prints a failure as one line, and returns the exit code.
func Run(cmd *cobra.Command, args []string) int {
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return ExitOK
	}
	code := ExitUsage
	var ee *ExitError
	if errors.As(err, &ee) {
		code = ee.Code
		err = ee.Err
	}
	if err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "error: "+oneLine(err.Error()))
	}
	return code
}

// oneLine keeps an error on one line, as every error of the plugin is printed.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// exactArgs is cobra.ExactArgs as a usage error.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError("%s takes %s (got %d arguments; see %s --help)", cmd.CommandPath(), what, len(args), cmd.CommandPath())
		}
		return nil
	}
}

func (r *root) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Args:  exactArgs(0, "no arguments"),
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(r.streams.Out, "kubectl-teardown "+version(Version)) },
	}
}

// someArgs requires at least one argument, as a usage error naming what is expected.
func someArgs(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageError("%s needs at least one %s", cmd.Name(), what)
		}
		return nil
	}
}
