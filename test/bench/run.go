package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// bench is one contender's run: its cluster, clients, and what it measures.
type bench struct {
	o          options
	contender  contender
	kubeconfig string
	c          client.WithWatch
	cs         kubernetes.Interface
	proc       *process
	ep         *endpoint
	metrics    string
	ns         string
	pprof      string         // the operator's --pprof-bind-address, with -profile
	pids       map[string]int // the cluster's processes and the contender's, by name
}

// runOne measures one contender on a fresh cluster of its own.
func runOne(o options, con contender) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cluster := o.cluster + "-" + con.name
	kubeconfig, err := framework.StartCluster(o.root, cluster)
	if err != nil {
		return nil, err
	}
	if !o.keepCluster {
		defer func() {
			if err := framework.StopCluster(o.root, cluster); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	b := &bench{o: o, contender: con, kubeconfig: kubeconfig, pids: clusterPIDs(kwokDir(o, cluster))}
	if err := b.connect(ctx); err != nil {
		return nil, err
	}
	steps, err := b.startContender()
	if err != nil {
		return nil, err
	}
	defer b.stop()
	r := &result{contender: con.name, rssIdle: -1, peak: -1, rssRetained: -1}
	if r.protect, err = b.protect(ctx, steps); err != nil {
		return nil, err
	}
	if b.proc != nil {
		r.rssIdle = b.proc.rss()
	}
	if err := b.teardown(ctx, r); err != nil {
		return nil, err
	}
	return r, b.protectAgain(ctx, r)
}

func (b *bench) connect(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", b.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = -1 // the benchmark's own client must not be the bottleneck
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	if b.c, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if b.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := framework.InstallCRDs(ctx, b.c, filepath.Join(b.o.root, "config", "crd", "bases")); err != nil {
		return err
	}
	return client.IgnoreAlreadyExists(b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "teardown-system"}}))
}

// startContender starts the contender's process and returns the policy's steps.
func (b *bench) startContender() ([]v1alpha1.Step, error) {
	steps := []v1alpha1.Step{framework.WaitStep("noop", 0)}
	var modeArgs []string
	if b.o.step != stepWait {
		var err error
		if b.ep, err = startEndpoint(b.o.httpDelay); err != nil {
			return nil, err
		}
		if b.metrics, err = freeAddr(); err != nil {
			return nil, err
		}
		modeArgs = []string{"--metrics-bind-address=" + b.metrics, "--http-allowed-destinations=" + b.ep.addr()}
		steps = []v1alpha1.Step{httpStep(b.ep.addr())}
		if b.o.step == stepPipeline {
			steps = []v1alpha1.Step{framework.WaitStep("before", 0), httpStep(b.ep.addr()), framework.WaitStep("after", 0)}
		}
		fmt.Printf("http endpoint %s, operator metrics %s\n", b.ep.addr(), b.metrics)
	}
	if b.contender.start == nil {
		return steps, nil
	}
	var err error
	if b.o.profile > 0 && b.contender.policy != nil {
		if b.pprof, err = freeAddr(); err != nil {
			return nil, err
		}
		modeArgs = append(modeArgs, "--pprof-bind-address="+b.pprof)
	}
	b.proc, err = b.contender.start(b.o, b.kubeconfig, modeArgs)
	return steps, err
}

func (b *bench) stop() {
	if b.proc != nil {
		b.proc.stop()
	}
	if b.ep != nil {
		b.ep.stop()
	}
}

// protect creates the targets and waits until the contender protects them all.
func (b *bench) protect(ctx context.Context, steps []v1alpha1.Step) (time.Duration, error) {
	b.ns = fmt.Sprintf("bench-%d", time.Now().Unix())
	if err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.ns}}); err != nil {
		return 0, err
	}
	if err := b.contender.arm(ctx, b.c, b.ns, steps); err != nil {
		return 0, err
	}
	fmt.Printf("creating %d ConfigMaps in %s\n", b.o.n, b.ns)
	start := time.Now()
	err := b.createProtected(ctx, 0)
	return time.Since(start), err
}

// createProtected creates n targets numbered from first, and waits until the contender protects
// n objects.
func (b *bench) createProtected(ctx context.Context, first int) error {
	if err := forEach(ctx, b.o.n, b.o.parallel, func(i int) error {
		return b.c.Create(ctx, newTarget(b.contender.name, b.ns, first+i))
	}); err != nil {
		return fmt.Errorf("creating ConfigMaps: %w", err)
	}
	have := 0
	if err := waitFor(ctx, 10*time.Minute, func() (bool, error) {
		var err error
		have, err = b.contender.protected(ctx, b.c, b.ns)
		return have == b.o.n, err
	}); err != nil {
		return fmt.Errorf("waiting for %d protected objects (have %d): %w", b.o.n, have, err)
	}
	return nil
}

// deleteTarget deletes target i; the raw floor then releases it itself.
func (b *bench) deleteTarget(ctx context.Context, i int) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name(i)}}
	if err := b.c.Delete(ctx, cm); err != nil || b.contender.name != contenderRaw {
		return err
	}
	return b.c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
}

// deleteAll deletes every target at once, or their namespace with -namespace, noting when.
func (b *bench) deleteAll(ctx context.Context, deletedAt []time.Time) error {
	if b.o.namespace {
		now := time.Now()
		for i := range deletedAt {
			deletedAt[i] = now
		}
		return b.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.ns}})
	}
	return forEach(ctx, b.o.n, b.o.parallel, func(i int) error {
		deletedAt[i] = time.Now()
		return b.deleteTarget(ctx, i)
	})
}

// waitNamespaceGone waits until the deleted namespace is gone.
func (b *bench) waitNamespaceGone(ctx context.Context) error {
	return waitFor(ctx, b.o.timeout, func() (bool, error) {
		err := b.c.Get(ctx, client.ObjectKey{Name: b.ns}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// teardown deletes every target at once and measures until the last is gone.
func (b *bench) teardown(ctx context.Context, r *result) error {
	gone, err := watchDeletions(ctx, b.c, b.ns, b.o.n)
	if err != nil {
		return err
	}
	// Run before StopCluster: a watch that outlives the API server fails to resume.
	defer gone.stop()
	var cpuBefore time.Duration
	if b.proc != nil {
		cpuBefore = b.proc.cpu()
	}
	before, err := writeCounts(ctx, b.cs)
	if err != nil {
		return err
	}
	var prof *profiler
	if b.o.profile > 0 {
		prof = startProfile(ctx, b.cs, b.pprof, filepath.Join(b.o.root, "bin"), b.o.profile)
	}
	deletedAt := make([]time.Time, b.o.n)
	busyBefore, totalBefore := machineCPU()
	procsBefore := sampleCPU(b.processes())
	start := time.Now()
	if err := b.deleteAll(ctx, deletedAt); err != nil {
		diagnose(b.o, b.c, b.ns, gone.snapshot(), b.ep, b.metrics)
		return fmt.Errorf("deleting ConfigMaps: %w", err)
	}
	stopProgress := progress(b.o, gone, b.ep, start)
	goneAt, err := gone.wait(ctx, b.o.n)
	stopProgress()
	if err != nil {
		snap := gone.snapshot()
		diagnose(b.o, b.c, b.ns, snap, b.ep, b.metrics)
		return fmt.Errorf("waiting for %d targets to be gone (%d seen gone): %w", b.o.n, countTargets(snap), err)
	}
	gone.stop() // every target is gone: nothing more to watch for
	if b.o.namespace {
		if err := b.waitNamespaceGone(ctx); err != nil {
			return err
		}
	}
	r.total = time.Since(start)
	busy, total := machineCPU()
	r.machineBusy = float64(busy-busyBefore) / float64(total-totalBefore)
	r.procsBefore, r.procsAfter = procsBefore, sampleCPU(b.processes())
	reportRestarts(gone, start)
	if b.proc != nil {
		r.cpu = b.proc.cpu() - cpuBefore
	}
	if err := b.measure(ctx, r, before, deletedAt, goneAt); err != nil {
		return err
	}
	if prof != nil {
		return prof.report(ctx)
	}
	return nil
}

// measure reads the API server's counters and prints the contender's figures.
func (b *bench) measure(ctx context.Context, r *result, before map[string]int, deletedAt []time.Time, goneAt map[string]time.Time) error {
	// Let the last writes (run finalizers, policy status) land before counting.
	time.Sleep(3 * time.Second)
	after, err := writeCounts(ctx, b.cs)
	if err != nil {
		return err
	}
	var lat []time.Duration
	for i := range b.o.n {
		lat = append(lat, goneAt[name(i)].Sub(deletedAt[i]))
	}
	slices.Sort(lat)
	r.p50, r.p99 = pct(lat, 50), pct(lat, 99)
	writes := diff(after, before)
	if !b.o.namespace {
		writes["DELETE configmaps"] -= b.o.n // the benchmark's own deletes
	}
	if b.contender.name == contenderRaw {
		writes["PATCH configmaps"] -= b.o.n // the floor's own releases: the benchmark's too
	}
	var opWrites, opReads int
	for k, v := range writes {
		if strings.HasPrefix(k, timeKey) {
			continue
		}
		if strings.HasPrefix(k, "read ") {
			opReads += v
		} else {
			opWrites += v
		}
	}
	r.writes, r.reads = float64(opWrites)/float64(b.o.n), float64(opReads)/float64(b.o.n)
	if b.proc != nil {
		r.peak = b.proc.peak()
	}
	b.print(r, lat, writes)
	if b.o.step != stepWait {
		return httpReport(ctx, b.o, b.ep, b.metrics, b.proc.log.Name(), deletedAt, goneAt)
	}
	return nil
}

func (b *bench) print(r *result, lat []time.Duration, writes map[string]int) {
	switch {
	case b.o.step == stepHTTP:
		fmt.Printf("\nteardown benchmark, %s: %d targets, one http step (POST to a local server answering after %s), operator defaults + --http-allowed-destinations\n", r.contender, b.o.n, b.o.httpDelay)
	case b.o.step == stepPipeline:
		fmt.Printf("\nteardown benchmark, %s: %d targets, three steps (wait 0s, http POST to a local server answering after %s, wait 0s), operator defaults + --http-allowed-destinations\n", r.contender, b.o.n, b.o.httpDelay)
	default:
		fmt.Printf("\nteardown benchmark, %s: %d targets, one wait step (duration 0), defaults\n", r.contender, b.o.n)
	}
	fmt.Printf("  protect %d new objects (create to finalizer):  %s\n", b.o.n, r.protect.Round(time.Millisecond))
	fmt.Printf("  first delete to last target gone:            %s  (%.0f targets/s)\n", r.total.Round(time.Millisecond), float64(b.o.n)/r.total.Seconds())
	fmt.Printf("  delete-to-gone latency p50 / p90 / p99 / max: %s / %s / %s / %s\n",
		r.p50, pct(lat, 90), r.p99, lat[len(lat)-1].Round(time.Millisecond))
	fmt.Printf("  API writes during teardown, per target:      %.2f  (all clients but the benchmark's deletes)\n", r.writes)
	fmt.Printf("  API reads (GET, LIST) per target:            %.2f\n", r.reads)
	for _, k := range slices.Sorted(maps.Keys(writes)) {
		if writes[k] > 0 && !strings.HasPrefix(k, timeKey) {
			fmt.Printf("      %-40s %7d  (%.2f per target, API server time %.1f ms each)\n", k, writes[k],
				float64(writes[k])/float64(b.o.n), float64(writes[timeKey+k])/1e3/float64(writes[k]))
		}
	}
	if b.proc != nil {
		fmt.Printf("  memory: RSS before deletes %s, peak RSS (VmHWM) %s\n", mib(r.rssIdle), mib(r.peak))
		fmt.Printf("  CPU during teardown: %.1f s (of %.1f s wall, on %d cores shared with the control plane)\n",
			r.cpu.Seconds(), r.total.Seconds(), runtime.NumCPU())
	}
	if r.machineBusy > 0 {
		fmt.Printf("  machine CPU busy during teardown (every process): %.0f%%\n", 100*r.machineBusy)
	}
	if len(r.procsAfter) > 0 {
		printPerObject(r.procsBefore, r.procsAfter, b.o.n)
	}
}

// reportRestarts says when the deletion watch had to be resumed.
func reportRestarts(gone *deletions, start time.Time) {
	restarts, inferred := gone.resumed()
	if len(restarts) == 0 {
		return
	}
	fmt.Printf("note: the deletion watch was closed %d times and resumed; %d deletions were found by a re-list (timed at the re-list):\n", len(restarts), inferred)
	for _, r := range restarts {
		fmt.Printf("      %s (%s after the first delete)\n", r.text, r.at.Sub(start).Round(time.Millisecond))
	}
}
