package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/cli/fixture"
	"github.com/teardown-dev/teardown-operator/cli/manifest"
)

// testOptions are the flags of kubectl teardown test.
type testOptions struct {
	output  string
	verbose bool
	allowed string
}

func (r *root) testCommand() *cobra.Command {
	var o testOptions
	cmd := &cobra.Command{
		Use:   "test FILE|DIR ...",
		Short: "Run policies against TeardownTest fixtures, offline",
		Long: `Runs every TeardownTest (apiVersion ` + fixture.APIVersion + `) found in the files and directories:
the policy it names is checked against its CRD schema, compiled and run by the operator's own
pipeline and step kinds against the test's object and scripted world (http answers, Job outcomes,
lookup results), on a virtual clock, with nothing sent or created outside the process. Each test
passes when the run ends as it expects (phase, steps, outputs, requests sent, Jobs created) and,
when it says so, the policy's deletion guard gives the verdict it expects.
docs/cli.md has the schema.

Exit status: 0 all passed, 1 a test failed, 2 usage error or a broken test (no tests, unreadable
file, a policy that is missing, fails its schema or does not compile, a script for a step the
policy lacks): the tests stop at the first broken one.`,
		Example: `  kubectl teardown test policies/
  kubectl teardown test -v samples/tests/database-dump-job.test.yaml
  kubectl teardown test --http-allowed-destinations=10.0.0.0/8 policies/`,
		Args: someArgs("FILE or DIR"),
		RunE: func(cmd *cobra.Command, args []string) error { return r.runTests(cmd.Context(), args, o) },
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	cmd.Flags().BoolVarP(&o.verbose, "verbose", "v", false, "print each run's steps, passed or not")
	cmd.Flags().StringVar(&o.allowed, "http-allowed-destinations", "",
		"the operator's --http-allowed-destinations: comma-separated addresses or CIDR ranges, each optionally with :port, that http steps may reach")
	return cmd
}

// runTests runs the tests in the files and directories of args.
func (r *root) runTests(ctx context.Context, args []string, o testOptions) error {
	if o.output != "text" && o.output != "json" {
		return usageError("--output %q: must be text or json", o.output)
	}
	allowed, err := parseDestinations(o.allowed)
	if err != nil {
		return err
	}
	opts := fixture.Options{AllowedDestinations: allowed}
	docs, err := manifest.Read(args, r.streams.In)
	if err != nil {
		return readError(err)
	}
	tests, err := fixture.Load(docs)
	if err != nil {
		return usageError("%v", err)
	}
	if len(tests) == 0 {
		return usageError("no %s found in %s", fixture.Kind, strings.Join(args, ", "))
	}
	failed := 0
	var results []*fixture.Result
	for _, t := range tests {
		res := fixture.Run(ctx, t, opts)
		if res.InputErr != nil {
			return usageError("%v", res.InputErr) // the suite is broken: stop here
		}
		results = append(results, res)
		if !res.Passed {
			failed++
		}
		if o.output == "text" {
			r.printTestResult(res, o.verbose)
		}
	}
	if o.output == "json" {
		if err := r.printTestJSON(results); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(r.streams.Out, "%d passed, %d failed\n", len(tests)-failed, failed)
	}
	if failed > 0 {
		return findings
	}
	return nil
}

func (r *root) printTestResult(res *fixture.Result, verbose bool) {
	out := r.streams.Out
	verdict := "PASS"
	if !res.Passed {
		verdict = "FAIL"
	}
	var details []string
	if g := res.Guard; g != nil {
		if g.Deny {
			details = append(details, fmt.Sprintf("guard denies: %s", firstLineOf(g.Message)))
		} else {
			details = append(details, "guard allows")
		}
	}
	switch {
	case res.Run != nil:
		details = append(details, fmt.Sprintf("run %s after %s (virtual time)", res.Run.Status.Phase, res.Elapsed.Round(time.Second)))
	case res.NotProtected != "":
		details = append(details, "not protected: "+res.NotProtected)
	}
	detail := ""
	if len(details) > 0 {
		detail = ": " + strings.Join(details, "; ")
	}
	fmt.Fprintf(out, "%s  %s (%s)%s\n", verdict, res.Test.Name(), res.Test.File(), detail)
	for _, f := range res.Failures {
		fmt.Fprintf(out, "      %s\n", strings.ReplaceAll(f, "\n", "\n      "))
	}
	if (verbose || !res.Passed) && res.Run != nil {
		st := res.Run.Status
		for _, list := range []struct {
			kind  string
			steps []v1alpha1.StepStatus
		}{{"step", st.Steps}, {"finally", st.Finally}, {"onStuck", st.OnStuck}} {
			for _, s := range list.steps {
				fmt.Fprintf(out, "      %-7s %-20s %-9s attempts %d  %s\n", list.kind, s.Name, s.Phase, s.Attempts, firstLineOf(s.Message))
			}
		}
	}
}

// testReport is a test's result as -o json prints it.
type testReport struct {
	Name     string       `json:"name"`
	File     string       `json:"file"`
	Passed   bool         `json:"passed"`
	Failures []string     `json:"failures"`
	Phase    string       `json:"phase,omitempty"`
	Elapsed  string       `json:"virtualElapsed,omitempty"`
	Steps    any          `json:"steps,omitempty"`
	Guard    *guardReport `json:"guard,omitempty"`
}

// guardReport is the deletion guard's verdict, when the test checks it.
type guardReport struct {
	Deny    bool   `json:"deny"`
	Message string `json:"message,omitempty"`
}

func (r *root) printTestJSON(results []*fixture.Result) error {
	reports := make([]testReport, 0, len(results))
	for _, res := range results {
		rep := testReport{Name: res.Test.Name(), File: res.Test.File(), Passed: res.Passed, Failures: res.Failures}
		if rep.Failures == nil {
			rep.Failures = []string{}
		}
		if res.Run != nil {
			rep.Phase, rep.Elapsed, rep.Steps = string(res.Run.Status.Phase), res.Elapsed.String(), res.Run.Status.Steps
		}
		if res.Guard != nil {
			rep.Guard = &guardReport{Deny: res.Guard.Deny, Message: res.Guard.Message}
		}
		reports = append(reports, rep)
	}
	enc := json.NewEncoder(r.streams.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(reports)
}

func firstLineOf(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
