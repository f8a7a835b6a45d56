package jobstep

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LogReader reads the end of a container's log.
type LogReader interface {
	// TailLog returns at most the last lines of the container's log, read up to limit bytes.
	TailLog(ctx context.Context, namespace, pod, container string, lines, limit int64) ([]byte, error)
}

// NewLogReader returns a LogReader that asks the API server (pods/log).
func NewLogReader(cfg *rest.Config) (LogReader, error) {
	if cfg == nil {
		return nil, fmt.Errorf("log reader: no cluster configured")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("log reader: %w", err)
	}
	return apiLogs{cs}, nil
}

type apiLogs struct{ cs kubernetes.Interface }

func (l apiLogs) TailLog(ctx context.Context, namespace, pod, container string, lines, limit int64) ([]byte, error) {
	req := l.cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, TailLines: &lines, LimitBytes: &limit})
	rc, err := req.Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	return io.ReadAll(io.LimitReader(rc, limit))
}

// failureMessage says why a Job failed: its Failed condition, the failed container, and the last
// lines of that container's log (or why there are none).
func (a *action) failureMessage(ctx context.Context, job *batchv1.Job, failed *batchv1.JobCondition) string {
	// Reading pods and a log is extra work in a reconcile: bound all of it.
	ctx, cancel := context.WithTimeout(ctx, a.kind.logWait)
	defer cancel()
	var b strings.Builder
	fmt.Fprintf(&b, "Job %s/%s failed: %s", job.Namespace, job.Name, failed.Reason)
	if failed.Message != "" {
		fmt.Fprintf(&b, ": %s", failed.Message)
	}
	fmt.Fprintf(&b, " (%s)", summary(job))
	var pods corev1.PodList
	if err := a.kind.reader.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		fmt.Fprintf(&b, "; its pods cannot be listed: %v", err)
		return b.String()
	}
	pod, ctr := failedContainer(pods.Items)
	if pod == nil {
		b.WriteString("; no pod of the Job is left to read a log from")
		return b.String()
	}
	fmt.Fprintf(&b, "; pod %s", pod.Name)
	if ctr == nil {
		fmt.Fprintf(&b, " is %s with no container that ran", pod.Status.Phase)
		if pod.Status.Reason != "" {
			fmt.Fprintf(&b, " (%s: %s)", pod.Status.Reason, pod.Status.Message)
		}
		return b.String()
	}
	fmt.Fprintf(&b, " container %s %s", ctr.Name, describeState(ctr))
	// Ask for more than is kept: the last lines may be long, and the end is what matters.
	raw, err := a.kind.logs.TailLog(ctx, pod.Namespace, pod.Name, ctr.Name, LogTailLines, 16*LogTailBytes)
	switch {
	case err != nil:
		fmt.Fprintf(&b, "; its log cannot be read: %s", firstLine(err.Error()))
	case len(bytes.TrimSpace(raw)) == 0:
		b.WriteString("; its log is empty")
	default:
		fmt.Fprintf(&b, "; last lines of its log:\n%s", tail(raw, LogTailBytes))
	}
	return b.String()
}

// failedContainer picks the pod and container to report: the container that most recently
// terminated with a non-zero exit code, else the most recent pod that failed, else a container
// still running in the most recent pod.
func failedContainer(pods []corev1.Pod) (*corev1.Pod, *corev1.ContainerStatus) {
	var (
		bestPod *corev1.Pod
		bestCtr *corev1.ContainerStatus
	)
	for i := range pods {
		p := &pods[i]
		for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
			for j := range list {
				c := &list[j]
				if t := terminated(c); t == nil || t.ExitCode == 0 {
					continue
				}
				if bestCtr == nil || finishedAt(c).After(finishedAt(bestCtr)) {
					bestPod, bestCtr = p, c
				}
			}
		}
	}
	if bestPod != nil {
		return bestPod, bestCtr
	}
	sort.SliceStable(pods, func(i, j int) bool { return pods[j].CreationTimestamp.Before(&pods[i].CreationTimestamp) })
	for i := range pods {
		if pods[i].Status.Phase == corev1.PodFailed {
			return &pods[i], nil
		}
	}
	// A Job failed at its deadline (FailureTarget) while its pod still runs: report the container
	// that was at work, which the Job controller is stopping.
	for i := range pods {
		for _, list := range [][]corev1.ContainerStatus{pods[i].Status.InitContainerStatuses, pods[i].Status.ContainerStatuses} {
			for j := range list {
				if list[j].State.Running != nil {
					return &pods[i], &list[j]
				}
			}
		}
	}
	return nil, nil
}

// terminated is how a container last ended: now, or before it was restarted.
func terminated(c *corev1.ContainerStatus) *corev1.ContainerStateTerminated {
	if c.State.Terminated != nil {
		return c.State.Terminated
	}
	return c.LastTerminationState.Terminated
}

func finishedAt(c *corev1.ContainerStatus) time.Time { return terminated(c).FinishedAt.Time }

// describeState says how a container ended, for example "exited with code 3 (Error)".
func describeState(c *corev1.ContainerStatus) string {
	t := terminated(c)
	if t == nil && c.State.Running != nil {
		return "was still running (started " + c.State.Running.StartedAt.UTC().Format(time.RFC3339) + ") and is being stopped"
	}
	if t == nil {
		return "did not terminate"
	}
	out := fmt.Sprintf("exited with code %d", t.ExitCode)
	if t.Reason != "" {
		out += " (" + t.Reason + ")"
	}
	if t.Message != "" {
		out += ": " + firstLine(t.Message)
	}
	return out
}

// tail keeps the end of a log, at most max bytes, starting at a line and at a whole character.
func tail(raw []byte, max int) string {
	raw = bytes.TrimRight(raw, "\n")
	if len(raw) > max {
		atLineStart := raw[len(raw)-max-1] == '\n'
		raw = raw[len(raw)-max:]
		if i := bytes.IndexByte(raw, '\n'); !atLineStart && i >= 0 && i < len(raw)-1 {
			raw = raw[i+1:] // drop the partial first line
		}
		for len(raw) > 0 && !utf8.RuneStart(raw[0]) {
			raw = raw[1:] // the cut fell inside a character
		}
	}
	return strings.ToValidUTF8(string(raw), "\uFFFD")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 300 {
		cut := 300
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}
