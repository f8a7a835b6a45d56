package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/teardown-dev/teardown-operator/cli/discovery"
	"github.com/teardown-dev/teardown-operator/cli/lint"
	"github.com/teardown-dev/teardown-operator/cli/manifest"
)

// lintOptions are lint's flags.
type lintOptions struct {
	output, kindsFile, failOn, allowed string
}

func (r *root) lintCommand() *cobra.Command {
	o := &lintOptions{}
	cmd := &cobra.Command{
		Use:   "lint FILE|DIR|- ...",
		Short: "Check policies offline, as the API server and the operator would",
		Long: `Reads multi-document YAML (files, directories walked for *.yaml, *.yml and *.json, or - for
stdin such as kustomize build output), skips what is not a TeardownPolicy or ClusterTeardownPolicy,
and checks each policy against the CRD schema and with the operator's compiler. It also flags what
compiles but is risky: ` + strings.Join(lint.RiskCodes, ", ") + `.
A policy accepts a risk with the annotation ` + lint.AnnotationIgnore + `: "<code>,..."; a code there
that is none of these is flagged itself (` + lint.RiskUnknownIgnore + `).
List documents (kubectl get -o yaml) are linted item by item.

Exit status: 0 clean, 1 problems found, 2 usage error (no such file, not YAML, no policy found).`,
		Example: `  kubectl teardown lint policies/
  kustomize build overlays/prod | kubectl teardown lint -
  kubectl teardown lint --kinds kinds.json -o json policies/`,
		Args: someArgs("FILE, DIR or - (stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error { return r.lint(cmd.Context(), args, o) },
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	cmd.Flags().StringVar(&o.kindsFile, "kinds", "", "check kinds against this discovery dump (kubectl teardown kinds, or kubectl api-resources output)")
	cmd.Flags().StringVar(&o.failOn, "fail-on", "warning", "exit 1 on problems of this severity or worse: error or warning")
	cmd.Flags().StringVar(&o.allowed, "http-allowed-destinations", "", "the operator's --http-allowed-destinations: addresses TeardownPolicies may call")
	return cmd
}

func (r *root) lint(ctx context.Context, args []string, o *lintOptions) error {
	if o.output != "text" && o.output != "json" {
		return usageError("--output %q: must be text or json", o.output)
	}
	if o.failOn != string(lint.Error) && o.failOn != string(lint.Warning) {
		return usageError("--fail-on %q: must be error or warning", o.failOn)
	}
	opts := lint.Options{Namespace: r.namespaceOr("default")}
	var err error
	if opts.AllowedDestinations, err = parseDestinations(o.allowed); err != nil {
		return err
	}
	if o.kindsFile != "" {
		if opts.Kinds, err = discovery.Load(o.kindsFile); err != nil {
			return usageError("--kinds: %v", err)
		}
	}
	docs, err := manifest.Read(args, r.streams.In)
	if err != nil {
		return readError(err)
	}
	l, err := lint.New(opts)
	if err != nil {
		return err
	}
	res := l.Lint(ctx, docs)
	if res.Policies == 0 && res.Errors == 0 {
		return usageError("no TeardownPolicy or ClusterTeardownPolicy in %s (%d other %s)", strings.Join(args, ", "), res.Documents, plural(res.Documents, "document", "documents"))
	}
	if err := r.printLint(res, o.output); err != nil {
		return err
	}
	if res.Errors > 0 || o.failOn == string(lint.Warning) && res.Warnings > 0 {
		return findings
	}
	return nil
}

func (r *root) printLint(res lint.Result, output string) error {
	out := r.streams.Out
	if output == "json" {
		if res.Problems == nil {
			res.Problems = []lint.Problem{}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	for _, p := range res.Problems {
		fmt.Fprintln(out, p.String())
	}
	fmt.Fprintf(out, "%d %s checked in %d %s: %d %s, %d %s\n", res.Policies, plural(res.Policies, "policy", "policies"),
		res.Documents, plural(res.Documents, "document", "documents"), res.Errors, plural(res.Errors, "error", "errors"),
		res.Warnings, plural(res.Warnings, "warning", "warnings"))
	return nil
}

// readError turns an unreadable input into a usage error.
func readError(err error) error {
	var re *manifest.ReadError
	if errors.As(err, &re) {
		return &ExitError{Code: ExitUsage, Err: err}
	}
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// namespaceOr is the namespace -n names, or def.
func (r *root) namespaceOr(def string) string {
	if r.flags.Namespace != nil && *r.flags.Namespace != "" {
		return *r.flags.Namespace
	}
	return def
}
