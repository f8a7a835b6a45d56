package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/teardown-dev/teardown-operator/cli/fixture"
	"github.com/teardown-dev/teardown-operator/cli/manifest"
)

func (r *root) testCommand() *cobra.Command {
	var output string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "test FILE|DIR ...",
		Short: "Run policies against TeardownTest fixtures, offline",
		Long: `Runs every TeardownTest (apiVersion ` + fixture.APIVersion + `) found in the files and directories:
the policy it names is compiled and run by the operator's own pipeline and step kinds against
the test's object and scripted world (http answers, Job outcomes, lookup results), on a virtual
clock, with nothing sent or created outside the process. Each test passes when the run ends as
it expects (phase, steps, outputs, requests sent, Jobs created). docs/cli.md has the schema.

Exit status: 0 all passed, 1 a test failed, 2 usage error (no tests, unreadable file).`,
		Example: `  kubectl teardown test policies/
  kubectl teardown test -v samples/tests/database-dump-job.test.yaml`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError("test needs at least one FILE or DIR")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return usageError("--output %q: must be text or json", output)
			}
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
				res := fixture.Run(cmd.Context(), t)
				results = append(results, res)
				if !res.Passed {
					failed++
				}
				if output == "text" {
					r.printTestResult(res, verbose)
				}
			}
			if output == "json" {
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
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print each run's steps, passed or not")
	return cmd
}

func (r *root) printTestResult(res *fixture.Result, verbose bool) {
	out := r.streams.Out
	verdict := "PASS"
	if !res.Passed {
		verdict = "FAIL"
	}
	detail := "not protected: " + res.NotProtected
	if res.Run != nil {
		detail = fmt.Sprintf("run %s after %s (virtual time)", res.Run.Status.Phase, res.Elapsed.Round(time.Second))
	}
	fmt.Fprintf(out, "%s  %s (%s): %s\n", verdict, res.Test.Name(), res.Test.File(), detail)
	for _, f := range res.Failures {
		fmt.Fprintf(out, "      %s\n", strings.ReplaceAll(f, "\n", "\n      "))
	}
	if (verbose || !res.Passed) && res.Run != nil {
		for _, s := range res.Run.Status.Steps {
			fmt.Fprintf(out, "      step %-20s %-9s attempts %d  %s\n", s.Name, s.Phase, s.Attempts, firstLineOf(s.Message))
		}
	}
}

// testReport is a test's result as -o json prints it.
type testReport struct {
	Name     string   `json:"name"`
	File     string   `json:"file"`
	Passed   bool     `json:"passed"`
	Failures []string `json:"failures"`
	Phase    string   `json:"phase,omitempty"`
	Elapsed  string   `json:"virtualElapsed,omitempty"`
	Steps    any      `json:"steps,omitempty"`
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
