package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// logTailLines is how much of a Job's log the tree shows.
const logTailLines = 5

// printRunTree prints a run and its steps as a tree.
func (r *root) printRunTree(ctx context.Context, w io.Writer, run *v1alpha1.TeardownRun, wide bool) {
	fmt.Fprintf(w, "TeardownRun %s/%s  %s  (%s)\n", run.Namespace, run.Name, phaseOf(run), durationOf(run.Status.StartTime, run.Status.CompletionTime))
	fmt.Fprintf(w, "  target  %s\n  policy  %s\n", targetOf(run), policyOf(run))
	if run.Status.Message != "" {
		fmt.Fprintf(w, "  message %s\n", clip(run.Status.Message, wide, runMessage))
	}
	if run.Status.AbandonedBy != "" {
		fmt.Fprintf(w, "  abandoned by %s\n", run.Status.AbandonedBy)
	}
	if lr := run.Status.LastRetry; lr != nil {
		fmt.Fprintf(w, "  retried %d time(s), last by %s from step %s\n", run.Status.Retries, lr.RequestedBy, lr.FromStep)
	}
	pl := run.Spec.Pipeline
	specs := pl.AllSteps()
	for i, spec := range specs {
		switch i {
		case len(pl.Steps) + len(pl.Finally):
			if run.Status.StuckTime == nil {
				return // onStuck steps are shown once the run was found stuck
			}
			fmt.Fprintf(w, "onStuck (stuck since %s)\n", run.Status.StuckTime.UTC().Format(time.RFC3339))
		case len(pl.Steps):
			fmt.Fprintf(w, "finally%s\n", endingNote(run))
		}
		branch, indent := "├─", "│  "
		if i == len(specs)-1 {
			branch, indent = "└─", "   "
		}
		r.printStep(ctx, w, run, &spec, branch, indent, wide)
	}
}

// endingNote says which ending the finally steps run for, while they do.
func endingNote(run *v1alpha1.TeardownRun) string {
	if e := run.Status.Ending; e != nil {
		return fmt.Sprintf(" (the pipeline ended %s: %s)", e.Phase, e.Message)
	}
	return ""
}

// printStep prints one step of the tree, with what its kind has to show.
func (r *root) printStep(ctx context.Context, w io.Writer, run *v1alpha1.TeardownRun, spec *v1alpha1.Step, branch, indent string, wide bool) {
	ss := run.Status.Step(spec.Name)
	if ss == nil || ss.Phase == v1alpha1.StepPending && ss.Attempts == 0 {
		fmt.Fprintf(w, "%s %s  Pending\n", branch, spec.Name)
		return
	}
	fmt.Fprintf(w, "%s %s  %s  attempts %d  %s\n", branch, spec.Name, ss.Phase, ss.Attempts, durationOf(ss.StartTime, ss.CompletionTime))
	if ss.Message != "" {
		fmt.Fprintf(w, "%s  %s\n", indent, strings.ReplaceAll(clip(ss.Message, wide, stepMessage), "\n", "\n"+indent+"  "))
	}
	for _, k := range slices.Sorted(maps.Keys(ss.Outputs)) {
		fmt.Fprintf(w, "%s  output %s = %s\n", indent, k, clip(string(ss.Outputs[k].Raw), wide, outputValue))
	}
	if spec.Job != nil {
		r.printJob(ctx, w, ss, indent)
	}
	if spec.Approval != nil {
		printApproval(w, ss, indent)
	}
}

// printApproval prints what an approval step asks, whole, and the answers it counted (its
// message says how to answer).
func printApproval(w io.Writer, ss *v1alpha1.StepStatus, indent string) {
	a := ss.Approval
	if a == nil {
		return
	}
	if a.Request != "" {
		fmt.Fprintf(w, "%s  asks: %s\n", indent, a.Request)
	}
	for _, d := range a.Decisions {
		verb := map[v1alpha1.ApprovalDecision]string{v1alpha1.Approve: "approved", v1alpha1.Reject: "rejected"}[d.Decision]
		fmt.Fprintf(w, "%s  %s by %s (groups %s) at %s, attempt %d: %s\n", indent, verb, d.Approver.Username,
			strings.Join(d.Approver.Groups, ", "), d.Time.UTC().Format(time.RFC3339), d.Attempt, d.Reason)
	}
	for _, why := range a.Ignored {
		fmt.Fprintf(w, "%s  not counted: %s\n", indent, why)
	}
}

// printJob prints the Job a job step made and the tail of its pod's log.
func (r *root) printJob(ctx context.Context, w io.Writer, ss *v1alpha1.StepStatus, indent string) {
	var name, ns string
	_ = json.Unmarshal(ss.Outputs["jobName"].Raw, &name)
	_ = json.Unmarshal(ss.Outputs["jobNamespace"].Raw, &ns)
	if name == "" {
		return
	}
	var job batchv1.Job
	if err := r.kube.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &job); err != nil {
		fmt.Fprintf(w, "%s  Job %s/%s: %s\n", indent, ns, name, oneLine(err.Error()))
		return
	}
	fmt.Fprintf(w, "%s  Job %s/%s: active %d, succeeded %d, failed %d\n", indent, ns, name, job.Status.Active, job.Status.Succeeded, job.Status.Failed)
	var pods corev1.PodList
	if err := r.kube.client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil || len(pods.Items) == 0 {
		return
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	pod := pods.Items[len(pods.Items)-1]
	cs, err := r.kube.clientset()
	if err != nil {
		return
	}
	lines := int64(logTailLines)
	raw, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{TailLines: &lines}).DoRaw(ctx)
	if err != nil {
		fmt.Fprintf(w, "%s  pod %s: log not readable: %s\n", indent, pod.Name, oneLine(err.Error()))
		return
	}
	fmt.Fprintf(w, "%s  pod %s log (last %d lines):\n", indent, pod.Name, logTailLines)
	for _, l := range strings.Split(strings.TrimRight(string(raw), "\n"), "\n") {
		fmt.Fprintf(w, "%s    %s\n", indent, l)
	}
}

// durationOf says how long something ran, or has been running.
func durationOf(start, end *metav1.Time) string {
	switch {
	case start == nil:
		return "not started"
	case end == nil:
		return "running for " + age(time.Since(start.Time))
	}
	return "took " + end.Sub(start.Time).Round(time.Second).String()
}

func clip(s string, wide bool, n int) string {
	if wide {
		return s
	}
	return truncate(s, n)
}

// printTo writes v as YAML or JSON.
func (r *root) printTo(w io.Writer, v any, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	raw, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(raw)
	return err
}

func policyKeyString(kind, ns, name string) string {
	return policy.Key{Kind: kind, Namespace: ns, Name: name}.String()
}
