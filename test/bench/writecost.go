package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// writeCost measures what one create of each object a teardown writes costs the control plane:
// a ConfigMap like the benchmark's targets, the event the operator records on one, and the
// TeardownRun the operator records for an instant success (taken from a real teardown), whole
// and without its snapshot, and the smallest custom resource (the floor of any record kept as
// one). With no controller running, it creates N of each
// and reports the CPU the API server and etcd spent per create; then the same for each way of
// releasing a terminating object (releaseCost).
func writeCost(o options) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cluster := o.cluster + "-writecost"
	kubeconfig, err := framework.StartCluster(o.root, cluster)
	if err != nil {
		return err
	}
	if !o.keepCluster {
		defer func() { _ = framework.StopCluster(o.root, cluster) }()
	}
	b := &bench{o: o, contender: contenders()[contenderAll], kubeconfig: kubeconfig}
	if err := b.connect(ctx); err != nil {
		return err
	}
	record, err := b.recordedRun(ctx)
	if err != nil {
		return fmt.Errorf("recording a run: %w", err)
	}
	slim := record.DeepCopy()
	slim.Spec.Object.Raw = nil
	if err := installProbeCRD(ctx, b.c); err != nil {
		return fmt.Errorf("installing the probe CRD: %w", err)
	}
	kinds := []struct {
		name string
		make func(ns string, i int) client.Object
	}{
		{"ConfigMap (a target)", func(ns string, i int) client.Object {
			return framework.ConfigMap(ns, name(i), map[string]string{"app": "bench"})
		}},
		{"Event (the operator's, on a target)", func(ns string, i int) client.Object { return benchEvent(ns, i) }},
		{"TeardownRun (an instant success's record)", func(ns string, i int) client.Object { return copyRun(record, ns, i) }},
		{"TeardownRun without its snapshot", func(ns string, i int) client.Object { return copyRun(slim, ns, i) }},
		{"a custom resource holding one string", probe},
	}
	pids := map[string]int{}
	for _, c := range []string{"kube-apiserver", "etcd"} {
		raw, err := os.ReadFile(filepath.Join(b.kwokDir(cluster), "pids", c+".pid"))
		if err != nil {
			return err
		}
		if pids[c], err = strconv.Atoi(strings.TrimSpace(string(raw))); err != nil {
			return fmt.Errorf("%s's pid file: %w", c, err)
		}
	}
	fmt.Printf("\ncontrol-plane CPU per create, %d creates of each, %d at a time, no controller running\n", o.n, o.parallel)
	fmt.Printf("%-44s %10s %14s %10s\n", "object", "creates/s", "kube-apiserver", "etcd")
	for k, kind := range kinds {
		ns := fmt.Sprintf("cost-%d", k)
		if err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
		api0, etcd0 := cpuOf(pids["kube-apiserver"]), cpuOf(pids["etcd"])
		start := time.Now()
		if err := forEach(ctx, o.n, o.parallel, func(i int) error {
			return b.c.Create(ctx, kind.make(ns, i), client.FieldOwner("teardown-operator"))
		}); err != nil {
			return fmt.Errorf("%s: %w", kind.name, err)
		}
		took := time.Since(start)
		per := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", d.Seconds()*1000/float64(o.n)) }
		fmt.Printf("%-44s %10.0f %14s %10s\n", kind.name, float64(o.n)/took.Seconds(),
			per(cpuOf(pids["kube-apiserver"])-api0), per(cpuOf(pids["etcd"])-etcd0))
	}
	return releaseCost(ctx, b, pids)
}

// recordedRun lets the operator tear one object down and returns the run it recorded.
func (b *bench) recordedRun(ctx context.Context) (*v1alpha1.TeardownRun, error) {
	err := b.startContender()
	defer b.stop()
	if err != nil {
		return nil, err
	}
	saved := b.o
	b.o.n, b.o.namespaces, b.o.deletes = 1, 1, 1
	defer func() { b.o = saved }()
	if err := b.arm(ctx); err != nil {
		return nil, err
	}
	if _, err := b.protect(ctx); err != nil {
		return nil, err
	}
	if err := b.deleteTarget(ctx, 0); err != nil {
		return nil, err
	}
	runs := &v1alpha1.TeardownRunList{}
	if err := waitFor(ctx, time.Minute, func() (bool, error) {
		return len(runs.Items) == 1, b.c.List(ctx, runs, client.InNamespace(b.namespaces[0]))
	}); err != nil {
		return nil, err
	}
	return &runs.Items[0], nil
}

// copyRun is the i-th copy of a recorded run, in namespace ns.
func copyRun(run *v1alpha1.TeardownRun, ns string, i int) *v1alpha1.TeardownRun {
	c := run.DeepCopy()
	c.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: name(i), Labels: run.Labels}
	return c
}

// benchEvent is an event like the one the operator records on a target whose teardown succeeded.
func benchEvent(ns string, i int) *corev1.Event {
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name(i) + ".teardown"},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: name(i), UID: types.UID(strconv.Itoa(i))},
		Reason:         v1alpha1.ReasonSucceeded, Type: corev1.EventTypeNormal,
		Message:        "all steps done: noop Succeeded (TeardownRun " + ns + "/" + name(i) + "-0123456789)",
		Source:         corev1.EventSource{Component: "teardown-operator"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
}

// kwokDir is where kwokctl keeps the cluster's state (test/cluster/up.sh's KWOK_WORKDIR).
func (b *bench) kwokDir(cluster string) string { return kwokDir(b.o, cluster) }

func kwokDir(o options, cluster string) string {
	dir := os.Getenv("KWOK_WORKDIR")
	if dir == "" {
		dir = filepath.Join(o.root, "bin", "kwok-state")
	}
	return filepath.Join(dir, "clusters", cluster)
}
