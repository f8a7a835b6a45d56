package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

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

func targetOf(run *v1alpha1.TeardownRun) string { return targetName(run.Spec.Target) }

// targetName names a target as the tables show it: Kind namespace/name, or Kind name.
func targetName(t v1alpha1.TargetObjectReference) string {
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

// printPolicyHistory prints what a policy's status says of its teardowns that ended: totals by
// outcome and the last few, newest first, whether or not a run was kept.
func printPolicyHistory(w io.Writer, policy string, st *v1alpha1.TeardownPolicyStatus, wide bool) {
	if st == nil {
		return
	}
	c := st.Teardowns
	fmt.Fprintf(w, "%s: teardowns ended %d times: %d succeeded, %d failed, %d abandoned, %d cancelled.\n", policy,
		c.Succeeded+c.Failed+c.Abandoned+c.Cancelled, c.Succeeded, c.Failed, c.Abandoned, c.Cancelled)
	if len(st.RecentTeardowns) == 0 {
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintln(w, "Recent teardowns, newest first:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENDED\tTARGET\tOUTCOME\tRUN\tMESSAGE")
	for _, t := range st.RecentTeardowns {
		run, msg := t.Run, t.Message
		if run == "" {
			run = "(not kept)"
		}
		if !wide {
			msg = truncate(firstLineOf(msg), tableMessage)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.CompletionTime.UTC().Format(time.RFC3339), targetName(t.Target), t.Outcome, run, msg)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
}

// printPolicyRuns prints a policy's runs as a table, in the order given (newest first).
func printPolicyRuns(w io.Writer, policy string, runs []v1alpha1.TeardownRun, wide bool) {
	if len(runs) == 0 {
		fmt.Fprintf(w, "No TeardownRun of %s is kept.\n", policy)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tTARGET\tPHASE\tSTARTED\tDURATION\tMESSAGE")
	for i := range runs {
		run := &runs[i]
		start := run.CreationTimestamp.Time
		if run.Status.StartTime != nil {
			start = run.Status.StartTime.Time
		}
		msg := run.Status.Message
		if !wide {
			msg = truncate(firstLineOf(msg), tableMessage)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", run.Namespace, run.Name, targetOf(run), phaseOf(run),
			start.UTC().Format(time.RFC3339), runDuration(run, start), msg)
	}
	_ = tw.Flush()
}

// runDuration is how long a run took, or has been running.
func runDuration(run *v1alpha1.TeardownRun, start time.Time) string {
	if end := run.Status.CompletionTime; end != nil {
		return end.Sub(start).Round(time.Second).String()
	}
	return "running " + age(time.Since(start))
}

// operatorNote is what the operator's lease says, where it matters: always when no replica holds
// it (nothing acts on deletions), and when that cannot be told, only if something waits on the
// operator (a run in flight, an object held with no run yet). Else "".
func operatorNote(l *statusLook) string {
	switch {
	case l.operator.Held:
		return ""
	case l.operator.down():
		return l.operator.String()
	case l.object != nil && l.object.waitsOnOperator():
		return l.operator.String()
	}
	for i := range l.runs {
		if !l.runs[i].Status.Phase.Finished() {
			return l.operator.String()
		}
	}
	return ""
}

// allFinished reports whether every run's phase is final.
func allFinished(runs []v1alpha1.TeardownRun) bool {
	for _, run := range runs {
		if !run.Status.Phase.Finished() {
			return false
		}
	}
	return true
}
