package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// Contenders, by name.
const (
	// contenderRaw is the floor: the benchmark creates each object with a finalizer, deletes it
	// and releases it itself, with no controller.
	contenderRaw = "raw"
	// contenderPeer is a controller written by hand in the textbook pattern (test/bench/peer).
	contenderPeer = "peer"
	// contenderOperator is teardown-operator at its defaults (runHistory SkipImmediateSuccess: no
	// TeardownRun for a teardown whose every step is done at once).
	contenderOperator = "operator"
	// contenderAll is teardown-operator in the audit mode: a TeardownRun for every deletion
	// (spec.runHistory All).
	contenderAll = "operator-all"
)

// rawFinalizer is the finalizer the raw contender's objects are created with.
const rawFinalizer = "bench.example.com/raw"

// contender is one way of holding objects until their teardown is done.
type contender struct {
	name string
	// start runs the contender's process; nil for the raw floor.
	start func(o options, kubeconfig string, modeArgs []string) (*process, error)
	// policy is the teardown-operator policy's runHistory; nil for the others.
	policy *v1alpha1.RunHistory
	// arm makes the contender protect the namespace's app=bench ConfigMaps.
	arm func(ctx context.Context, c client.Client, ns string, steps []v1alpha1.Step) error
	// protected counts the objects it protects.
	protected func(ctx context.Context, c client.Client, ns string) (int, error)
}

func contenders() map[string]contender {
	none := func(context.Context, client.Client, string, []v1alpha1.Step) error { return nil }
	return map[string]contender{
		contenderRaw:      {name: contenderRaw, arm: none, protected: finalizedBy(rawFinalizer)},
		contenderPeer:     {name: contenderPeer, start: startPeer, arm: none, protected: finalizedBy("peer.example.com/cleanup")},
		contenderOperator: operatorContender(contenderOperator, ""),
		contenderAll:      operatorContender(contenderAll, v1alpha1.RunHistoryAll),
	}
}

// operatorContender is teardown-operator with a policy keeping the given run history ("": the
// field left out, the default).
func operatorContender(name string, history v1alpha1.RunHistory) contender {
	return contender{name: name, start: startOperator, policy: &history, protected: operatorProtected,
		arm: func(ctx context.Context, c client.Client, ns string, steps []v1alpha1.Step) error {
			p := framework.NamespacedPolicy(ns, "bench", steps...)
			p.Spec.RunHistory = history
			return c.Create(ctx, p)
		}}
}

func operatorProtected(ctx context.Context, c client.Client, ns string) (int, error) {
	p := &v1alpha1.TeardownPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bench"}, p); err != nil {
		return 0, err
	}
	return int(p.Status.Protected), nil
}

// finalizedBy counts the namespace's ConfigMaps that carry a finalizer.
func finalizedBy(finalizer string) func(ctx context.Context, c client.Client, ns string) (int, error) {
	return func(ctx context.Context, c client.Client, ns string) (int, error) {
		list := configMapList()
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return 0, err
		}
		n := 0
		for _, cm := range list.Items {
			for _, f := range cm.Finalizers {
				if f == finalizer {
					n++
				}
			}
		}
		return n, nil
	}
}

// newTarget is the i-th target; the raw floor's carry their finalizer from the start.
func newTarget(contender, ns string, i int) *corev1.ConfigMap {
	cm := framework.ConfigMap(ns, name(i), map[string]string{"app": "bench"})
	if contender == contenderRaw {
		cm.Finalizers = []string{rawFinalizer}
	}
	return cm
}

// startPeer builds and runs the hand-written controller.
func startPeer(o options, kubeconfig string, _ []string) (*process, error) {
	bin := filepath.Join(o.root, "bin", "bench-peer")
	// Built as the operator is for release (make build), so that both binaries map alike.
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./test/bench/peer")
	build.Dir = o.root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the peer controller: %v: %s", err, out)
	}
	return startProcess(filepath.Join(o.root, "bin", "bench-peer.log"), bin, "--kubeconfig", kubeconfig)
}

// compare prints each contender's figures and their ratio to the hand-written controller's.
func compare(o options, results []result) {
	var peer *result
	for i := range results {
		if results[i].contender == contenderPeer {
			peer = &results[i]
		}
	}
	fmt.Printf("\nside by side: %d targets, %s; ratios are to the hand-written controller (peer)\n", o.n, describeSteps(o.step))
	fmt.Printf("  %-18s %14s %10s %10s %8s %8s %11s %11s\n", "contender", "objects/s", "p50", "p99", "writes", "reads", "peak RSS", "protect")
	for _, r := range results {
		rate := float64(o.n) / r.total.Seconds()
		line := fmt.Sprintf("  %-18s %8.0f", r.contender, rate)
		if peer != nil {
			line += fmt.Sprintf(" %4.2fx", rate/(float64(o.n)/peer.total.Seconds()))
		}
		peak := "-"
		if r.peak >= 0 {
			peak = mib(r.peak)
		}
		fmt.Printf("%s %10s %10s %8.2f %8.2f %11s %11s\n", line, r.p50, r.p99, r.writes, r.reads, peak, r.protect.Round(time.Millisecond))
	}
}

// describeSteps says in words what the benchmark policy's steps are.
func describeSteps(step string) string {
	switch step {
	case stepHTTP:
		return "one http step"
	case stepPipeline:
		return "three steps (wait 0s, http, wait 0s)"
	}
	return "one wait step (duration 0)"
}
