package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// diagnose prints, to stderr, what is left when the teardown does not finish: the deleted targets
// (keys) not gone, the runs by phase with a few unfinished ones in full, the local endpoint's view
// (http mode) and the operator's queue and run gauges (when its metrics address is known).
func diagnose(c client.Client, keys []string, gone map[string]time.Time, ep *endpoint, metricsAddr string) {
	// The run's own context may be the one that ran out.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := os.Stderr
	fmt.Fprintf(w, "\n--- diagnosis at %s: %d of %d targets seen gone\n", time.Now().UTC().Format("15:04:05.000"), len(gone), len(keys))
	diagnoseTargets(ctx, w, c, keys)
	diagnoseRuns(ctx, w, c)
	diagnoseOperator(ctx, w, keys, ep, metricsAddr)
}

// diagnoseTargets prints the deleted targets still there.
func diagnoseTargets(ctx context.Context, w io.Writer, c client.Client, keys []string) {
	deleted := map[string]bool{}
	for _, k := range keys {
		deleted[k] = true
	}
	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms, targetLabels); err != nil {
		fmt.Fprintf(w, "listing ConfigMaps: %v\n", err)
	} else {
		left := 0
		for _, cm := range cms.Items {
			if !deleted[client.ObjectKeyFromObject(&cm).String()] {
				continue
			}
			left++
			if left <= 10 {
				fmt.Fprintf(w, "  left: %s/%s deletionTimestamp=%v finalizers=%v uid=%s\n", cm.Namespace, cm.Name, cm.DeletionTimestamp, cm.Finalizers, cm.UID)
			}
		}
		fmt.Fprintf(w, "  deleted targets still in the API server: %d\n", left)
	}
}

// diagnoseRuns prints the runs by phase, and a few unfinished ones in full.
func diagnoseRuns(ctx context.Context, w io.Writer, c client.Client) {
	var runs v1alpha1.TeardownRunList
	if err := c.List(ctx, &runs); err != nil {
		fmt.Fprintf(w, "listing TeardownRuns: %v\n", err)
	} else {
		byPhase := map[string]int{}
		var unfinished []v1alpha1.TeardownRun
		perTarget := map[string]int{}
		for _, r := range runs.Items {
			phase := string(r.Status.Phase)
			for _, s := range r.Status.Steps {
				phase += fmt.Sprintf(" %s=%s", s.Name, s.Phase)
			}
			byPhase[phase]++
			perTarget[r.Spec.Target.Name]++
			if !r.Status.Phase.Finished() {
				unfinished = append(unfinished, r)
			}
		}
		phases := make([]string, 0, len(byPhase))
		for k := range byPhase {
			phases = append(phases, k)
		}
		sort.Strings(phases)
		fmt.Fprintf(w, "  TeardownRuns: %d\n", len(runs.Items))
		for _, k := range phases {
			fmt.Fprintf(w, "    %-50q %d\n", k, byPhase[k])
		}
		multi := 0
		for _, n := range perTarget {
			if n > 1 {
				multi++
			}
		}
		fmt.Fprintf(w, "  targets with more than one run: %d\n", multi)
		sort.Slice(unfinished, func(i, j int) bool { return unfinished[i].Spec.Target.Name < unfinished[j].Spec.Target.Name })
		for _, r := range unfinished[:min(len(unfinished), 5)] {
			fmt.Fprintf(w, "  unfinished run %s/%s (uid %s) target %s: phase %q current %q start %v message %q finalizers %v rv %s\n",
				r.Namespace, r.Name, r.UID, r.Spec.Target.Name, r.Status.Phase, r.Status.CurrentStep, r.Status.StartTime, r.Status.Message, r.Finalizers, r.ResourceVersion)
			for _, s := range r.Status.Steps {
				fmt.Fprintf(w, "      step %s: %s attempts %d start %v next %v retry %v message %q state %v\n",
					s.Name, s.Phase, s.Attempts, s.StartTime, s.NextCheckTime, s.RetryTime, s.Message, s.State)
			}
		}
	}
}

// diagnoseOperator prints the local endpoint's view of the deleted targets (http mode) and the
// operator's queue and run gauges (when its metrics address is known).
func diagnoseOperator(ctx context.Context, w io.Writer, keys []string, ep *endpoint, metricsAddr string) {
	if ep != nil {
		reqs, bad := ep.requests()
		total, none, dup := 0, 0, 0
		for i := range keys {
			rs := reqs[name(i)]
			total += len(rs)
			switch {
			case len(rs) == 0:
				none++
			case len(rs) > 1:
				dup++
			}
		}
		fmt.Fprintf(w, "  endpoint: %d requests for targets, %d targets with none, %d with more than one, %d unexpected\n", total, none, dup, len(bad))
	}
	if metricsAddr != "" {
		if raw, err := get(ctx, "http://"+metricsAddr+"/metrics"); err != nil {
			fmt.Fprintf(w, "  operator metrics: %v\n", err)
		} else {
			for _, l := range strings.Split(raw, "\n") {
				if strings.HasPrefix(l, "workqueue_depth") || strings.HasPrefix(l, "workqueue_unfinished_work_seconds") ||
					strings.HasPrefix(l, "workqueue_longest_running_processor_seconds") || strings.HasPrefix(l, "teardown_runs_") ||
					strings.HasPrefix(l, "controller_runtime_active_workers") || strings.HasPrefix(l, "teardown_step_failures_total") ||
					strings.HasPrefix(l, "controller_runtime_reconcile_errors_total") {
					fmt.Fprintf(w, "    %s\n", l)
				}
			}
		}
	}
}

func get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	return string(raw), err
}
