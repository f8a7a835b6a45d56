// Command bench measures teardown throughput on the local kwok cluster: it protects N ConfigMaps
// with a one-step policy (a wait of duration 0), deletes them all, and prints the time from the
// first delete to the last object gone, the delete-to-gone latency percentiles, the API write
// requests per target (from the API server's own request counters) and the operator's peak memory.
//
// The operator runs as its own process with its default flags, as a user would run it.
//
// With -step http the policy's one step is instead an http step that POSTs to a server the
// benchmark runs on 127.0.0.1 (the operator gets --http-allowed-destinations for it, and a known
// metrics port); the benchmark also prints the requests received, duplicates, the time from
// delete to request and from request to gone, and the operator's own step-duration histogram.
//
//	go run ./test/bench -n 1000
//	go run ./test/bench -n 1000 -step http
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

type options struct {
	n           int
	parallel    int
	root        string
	cluster     string
	keepCluster bool
	operatorBin string
	timeout     time.Duration
	extraArgs   string
	step        string
	httpDelay   time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 1000, "targets to protect and delete")
	flag.IntVar(&o.parallel, "parallel", 32, "concurrent create and delete requests from the benchmark")
	flag.StringVar(&o.root, "root", ".", "repository root")
	flag.StringVar(&o.cluster, "cluster", "teardown-bench", "kwok cluster name")
	flag.BoolVar(&o.keepCluster, "keep-cluster", false, "leave the cluster running afterwards")
	flag.StringVar(&o.operatorBin, "operator", "bin/teardown-operator", "operator binary (make build)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	flag.StringVar(&o.extraArgs, "operator-args", "", "extra operator flags, space-separated (the default is none: production defaults)")
	flag.StringVar(&o.step, "step", "wait", "the policy's one step: wait (duration 0) or http (a POST to a local server)")
	flag.DurationVar(&o.httpDelay, "http-delay", 0, "with -step http, how long the local server waits before it answers")
	flag.Parse()
	if o.step != "wait" && o.step != "http" {
		fmt.Fprintf(os.Stderr, "bench: -step must be wait or http, not %q\n", o.step)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	kubeconfig, err := framework.StartCluster(o.root, o.cluster)
	if err != nil {
		return err
	}
	if !o.keepCluster {
		defer func() {
			if err := framework.StopCluster(o.root, o.cluster); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = -1 // the benchmark's own client must not be the bottleneck
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := framework.InstallCRDs(ctx, c, filepath.Join(o.root, "config", "crd", "bases")); err != nil {
		return err
	}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "teardown-system"}})); err != nil {
		return err
	}

	var (
		ep          *endpoint
		metricsAddr string
		modeArgs    []string
		step        = framework.WaitStep("noop", 0)
	)
	if o.step == "http" {
		if ep, err = startEndpoint(o.httpDelay); err != nil {
			return err
		}
		defer ep.stop()
		if metricsAddr, err = freeAddr(); err != nil {
			return err
		}
		modeArgs = []string{"--metrics-bind-address=" + metricsAddr, "--http-allowed-destinations=" + ep.addr()}
		step = httpStep(ep.addr())
		fmt.Printf("http endpoint %s, operator metrics %s\n", ep.addr(), metricsAddr)
	}
	op, err := startOperator(o, kubeconfig, modeArgs...)
	if err != nil {
		return err
	}
	defer op.stop()

	ns := fmt.Sprintf("bench-%d", time.Now().Unix())
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	p := framework.NamespacedPolicy(ns, "bench", step)
	if err := c.Create(ctx, p); err != nil {
		return err
	}
	fmt.Printf("creating %d ConfigMaps in %s\n", o.n, ns)
	createStart := time.Now()
	if err := forEach(ctx, o.n, o.parallel, func(i int) error {
		return c.Create(ctx, framework.ConfigMap(ns, name(i), map[string]string{"app": "bench"}))
	}); err != nil {
		return fmt.Errorf("creating ConfigMaps: %w", err)
	}
	if err := waitFor(ctx, 5*time.Minute, func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return false, err
		}
		return int(p.Status.Protected) == o.n, nil
	}); err != nil {
		return fmt.Errorf("waiting for %d protected objects (have %d): %w", o.n, p.Status.Protected, err)
	}
	protectTime := time.Since(createStart)
	rssIdle := op.rss()

	gone, err := watchDeletions(ctx, c, ns, o.n)
	if err != nil {
		return err
	}
	// Deferred after StopCluster, so run before it: the watch must end while the API server is
	// still there, or it sees its connection closed and fails to resume ("connection refused").
	defer gone.stop()
	cpuBefore := op.cpu()
	before, err := writeCounts(ctx, cs)
	if err != nil {
		return err
	}
	deletedAt := make([]time.Time, o.n)
	start := time.Now()
	if err := forEach(ctx, o.n, o.parallel, func(i int) error {
		deletedAt[i] = time.Now()
		return c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i)}})
	}); err != nil {
		diagnose(o, c, ns, gone.snapshot(), ep, metricsAddr)
		return fmt.Errorf("deleting ConfigMaps: %w", err)
	}
	stopProgress := progress(o, gone, ep, start)
	goneAt, err := gone.wait(ctx, o.n)
	stopProgress()
	if err == nil {
		gone.stop() // every target is gone: nothing more to watch for
	}
	if err != nil {
		snap := gone.snapshot()
		diagnose(o, c, ns, snap, ep, metricsAddr)
		return fmt.Errorf("waiting for %d targets to be gone (%d seen gone): %w", o.n, countTargets(snap), err)
	}
	total := time.Since(start)
	if restarts, inferred := gone.resumed(); len(restarts) > 0 {
		fmt.Printf("note: the deletion watch was closed %d times and resumed; %d deletions were found by a re-list (timed at the re-list):\n", len(restarts), inferred)
		for _, r := range restarts {
			fmt.Printf("      %s (%s after the first delete)\n", r.text, r.at.Sub(start).Round(time.Millisecond))
		}
	}
	// Let the operator's last writes (run finalizers, policy status) land before counting.
	time.Sleep(3 * time.Second)
	after, err := writeCounts(ctx, cs)
	if err != nil {
		return err
	}

	var lat []time.Duration
	for i := range o.n {
		lat = append(lat, goneAt[name(i)].Sub(deletedAt[i]))
	}
	slices.Sort(lat)
	writes := diff(after, before)
	writes["DELETE configmaps"] -= o.n // the benchmark's own deletes
	var opWrites, opReads int
	for k, v := range writes {
		if strings.HasPrefix(k, "read ") {
			opReads += v
		} else {
			opWrites += v
		}
	}

	if o.step == "http" {
		fmt.Printf("\nteardown benchmark: %d targets, one http step (POST to a local server answering after %s), operator defaults + --http-allowed-destinations\n", o.n, o.httpDelay)
	} else {
		fmt.Printf("\nteardown benchmark: %d targets, one wait step (duration 0), operator defaults\n", o.n)
	}
	fmt.Printf("  protect %d new objects (create to finalizer):  %s\n", o.n, protectTime.Round(time.Millisecond))
	fmt.Printf("  first delete to last target gone:            %s  (%.0f targets/s)\n", total.Round(time.Millisecond), float64(o.n)/total.Seconds())
	fmt.Printf("  delete-to-gone latency p50 / p90 / p99 / max: %s / %s / %s / %s\n",
		pct(lat, 50), pct(lat, 90), pct(lat, 99), lat[len(lat)-1].Round(time.Millisecond))
	fmt.Printf("  API writes during teardown, per target:      %.2f  (all clients but the benchmark's deletes)\n", float64(opWrites)/float64(o.n))
	fmt.Printf("  API reads (GET, LIST) per target:            %.2f\n", float64(opReads)/float64(o.n))
	keys := make([]string, 0, len(writes))
	for k := range writes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if writes[k] != 0 {
			fmt.Printf("      %-40s %7d  (%.2f per target)\n", k, writes[k], float64(writes[k])/float64(o.n))
		}
	}
	fmt.Printf("  operator memory: RSS before deletes %s, peak RSS (VmHWM) %s\n", mib(rssIdle), mib(op.peak()))
	fmt.Printf("  operator CPU during teardown: %.1f s (of %.1f s wall, on %d cores shared with the control plane)\n",
		(op.cpu() - cpuBefore).Seconds(), total.Seconds(), runtime.NumCPU())
	if o.step == "http" {
		return httpReport(ctx, o, ep, metricsAddr, op.log.Name(), deletedAt, goneAt)
	}
	return nil
}

func name(i int) string { return fmt.Sprintf("target-%05d", i) }

// progress prints, to stderr every 30 s until stopped, how many targets are gone (and in http
// mode how many requests came), so that a stall shows when it began.
func progress(o options, d *deletions, ep *endpoint, start time.Time) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			msg := fmt.Sprintf("  ... %s: %d of %d targets gone", time.Since(start).Round(time.Second), countTargets(d.snapshot()), o.n)
			if ep != nil {
				reqs, _ := ep.requests()
				total := 0
				for _, rs := range reqs {
					total += len(rs)
				}
				msg += fmt.Sprintf(", %d requests received for %d targets", total, len(reqs))
			}
			fmt.Fprintln(os.Stderr, msg)
		}
	}()
	return func() { close(done) }
}

// writeCounts reads the API server's request counters for mutating verbs, by verb and resource.
func writeCounts(ctx context.Context, cs kubernetes.Interface) (map[string]int, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading API server metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("parsing API server metrics: %w", err)
	}
	out := map[string]int{}
	fam := families["apiserver_request_total"]
	if fam == nil {
		return nil, errors.New("API server exposes no apiserver_request_total")
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		verb := labels["verb"]
		switch verb {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		case "GET", "LIST":
			verb = "read " + verb
		default:
			continue
		}
		key := verb + " " + labels["resource"]
		if labels["subresource"] != "" {
			key += "/" + labels["subresource"]
		}
		out[key] += int(m.GetCounter().GetValue())
	}
	return out, nil
}

func diff(after, before map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

func forEach(ctx context.Context, n, parallel int, f func(i int) error) error {
	work := make(chan int)
	errs := make(chan error, parallel)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	go func() {
		defer close(work)
		for i := range n {
			select {
			case work <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	return <-errs
}

func waitFor(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(i, len(sorted))-1)].Round(time.Millisecond)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
