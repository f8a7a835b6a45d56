// Command bench measures teardown throughput on the local kwok cluster, side by side: for each
// contender (the raw floor, a hand-written peer controller, teardown-operator at its defaults and
// with runHistory All), each on a fresh cluster, it protects N ConfigMaps, deletes them all,
// and prints the time from the first delete to the last object gone, the delete-to-gone latency
// percentiles, the API requests per target (from the API server's own request counters), CPU and
// memory (idle, with N objects protected, and with N protected again and every finished run
// retained), the rate at which the contender protects new objects, then the ratio of each
// contender's figures to the peer's.
//
// The operator runs as its own process with its default flags, as a user would run it. Its policy
// has one wait step of 0s; -step http makes it one http step that POSTs to a server the benchmark
// runs on 127.0.0.1, and -step pipeline three steps (wait 0s, that POST, wait 0s); the benchmark then
// also prints the requests received, duplicates, and the operator's step-duration histogram.
// -step resource makes it one resource step that creates a record ConfigMap per deleted target as
// the ServiceAccount bench-recorder (impersonated), and waits for a condition on it that holds at
// once; the benchmark prints how many records exist afterwards. The operator-job contender (not run
// by default, -step resource only) writes that pipeline as a job step, a Job running kubectl as that
// ServiceAccount: kwok runs no container, so it measures the operator's Job handling, not kubectl.
// -namespace deletes the namespace instead of each object; -profile takes CPU profiles.
// -namespaces K spreads the targets over K namespaces, which the operator then protects with one
// ClusterTeardownPolicy; -delete M deletes only M of them (spread over the namespaces) and measures
// the teardown of those M. -timeout grows with N unless set. -rounds R runs the contenders R times,
// every other round in reverse order, and prints the medians of their ratios to the peer.
//
//	go run ./test/bench -n 1000
//	go run ./test/bench -n 1000 -step pipeline
//	go run ./test/bench -n 1000 -step resource -contenders peer,operator,operator-job
//	go run ./test/bench -n 10000 -namespace -contenders peer,operator
//	go run ./test/bench -n 100000 -namespaces 100 -delete 10000 -contenders peer,operator
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
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
	contenders  string
	profile     time.Duration
	namespace   bool
	writeCost   bool
	namespaces  int // how many namespaces the targets are spread over
	deletes     int // how many targets the teardown deletes (-delete, 0 resolved to n)
	rounds      int // how many times each contender runs, in alternating order
}

func main() {
	ctrllog.SetLogger(logr.Discard()) // the benchmark's clients have nothing to log
	o := parseFlags()
	if err := o.resolve(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	measure := run
	if o.writeCost {
		measure = writeCost
	}
	if err := measure(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags() options {
	var o options
	flag.IntVar(&o.n, "n", 1000, "targets to protect and delete")
	flag.IntVar(&o.namespaces, "namespaces", 1, "spread the targets over this many namespaces (target i in the (i mod K)-th); above 1 the operator protects them with one ClusterTeardownPolicy")
	flag.IntVar(&o.deletes, "delete", 0, "delete only this many of the targets, spread over the namespaces, and measure their teardown (0: all)")
	flag.IntVar(&o.rounds, "rounds", 1, "run the contenders this many times, every other round in reverse order, and print the medians of their ratios to the peer")
	flag.IntVar(&o.parallel, "parallel", 32, "concurrent create and delete requests from the benchmark")
	flag.StringVar(&o.root, "root", ".", "repository root")
	flag.StringVar(&o.cluster, "cluster", "teardown-bench", "kwok cluster name")
	flag.BoolVar(&o.keepCluster, "keep-cluster", false, "leave the cluster running afterwards")
	flag.StringVar(&o.operatorBin, "operator", "bin/teardown-operator", "operator binary (make build)")
	flag.DurationVar(&o.timeout, "timeout", 0, "give up on a contender after this long (0: 10m, or 30ms per target when that is longer)")
	flag.StringVar(&o.extraArgs, "operator-args", "", "extra operator flags, space-separated (the default is none: production defaults)")
	flag.StringVar(&o.step, "step", stepWait, "the policy's steps: wait (one, duration 0), http (one, a POST to a local server), pipeline (wait 0s, http, wait 0s) or resource (one, creating a record ConfigMap per target as a ServiceAccount)")
	flag.DurationVar(&o.httpDelay, "http-delay", 0, "with -step http, how long the local server waits before it answers")
	flag.DurationVar(&o.profile, "profile", 0, "profile the operator's CPU for this long from the first delete, its allocations, and its heap in use before the deletes, through --pprof-bind-address (bin/bench-operator.*.pprof)")
	flag.StringVar(&o.contenders, "contenders", "raw,peer,operator,operator-all", "who protects the targets, each on a fresh cluster: raw (the benchmark releases them itself), peer (a hand-written controller), operator (its defaults: runHistory SkipImmediateSuccess), operator-all (runHistory All, a TeardownRun for every deletion), operator-late (the defaults but --admission-arming=false: objects armed after their creation); with -step resource also operator-job (that pipeline as a job step running kubectl, whose pod kwok completes without running it)")
	flag.BoolVar(&o.namespace, "namespace", false, "delete the targets' namespace instead of each target, and time until the namespace is gone")
	flag.BoolVar(&o.writeCost, "write-cost", false, "instead of a teardown, measure the API server's and etcd's CPU per create of each object a teardown writes (a ConfigMap, an event, a TeardownRun) and per release of a terminating object, for each way of releasing it")
	flag.Parse()
	return o
}

// resolve checks the flags against each other and fills in the defaults that depend on others.
func (o *options) resolve() error {
	if err := o.checkStep(); err != nil {
		return err
	}
	if o.namespaces < 1 || o.namespaces > o.n {
		return fmt.Errorf("-namespaces must be between 1 and -n (%d), not %d", o.n, o.namespaces)
	}
	if o.deletes == 0 {
		o.deletes = o.n
	}
	if o.rounds < 1 {
		return fmt.Errorf("-rounds must be 1 or more, not %d", o.rounds)
	}
	if o.deletes < 0 || o.deletes > o.n {
		return fmt.Errorf("-delete must be between 1 and -n (%d), or 0 for all, not %d", o.n, o.deletes)
	}
	if o.namespace && (o.namespaces > 1 || o.deletes < o.n) {
		return errors.New("-namespace deletes the one namespace of the targets, and every target with it: leave out -namespaces and -delete")
	}
	if o.namespace && !flagSet("contenders") {
		o.contenders = "peer,operator,operator-all" // nobody would release the raw floor's objects
	}
	if o.namespace && strings.Contains(o.contenders, contenderRaw) {
		return errors.New("-namespace: the raw floor releases its objects itself, one by one; leave it out of -contenders")
	}
	if o.step != stepWait && !flagSet("contenders") {
		o.contenders = contenderOperator + "," + contenderAll // only the operator runs the steps
	}
	if o.timeout == 0 {
		// Creating, protecting and deleting run at a few hundred objects/s on 2 cores, the
		// slowest contender's teardown at under 100/s: 30 ms a target leaves room for both.
		o.timeout = scaledLimit(o.n, 30*time.Millisecond)
	}
	return nil
}

// scaledLimit is how long n targets may take at perTarget each, and never less than 10 minutes.
func scaledLimit(n int, perTarget time.Duration) time.Duration {
	return max(10*time.Minute, time.Duration(n)*perTarget)
}

// The benchmark policy's steps (-step).
const (
	stepWait     = "wait"
	stepHTTP     = "http"
	stepPipeline = "pipeline"
	stepResource = "resource"
)

// flagSet reports whether the command line set the flag.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// result is what one contender's run measured.
type result struct {
	contender      string
	protect, total time.Duration
	p50, p99       time.Duration
	// createP50 and createP99 are the latencies of the first targets' creates, and armedAtCreate
	// how many returned the object armed.
	createP50, createP99 time.Duration
	// createP99After is the p99 of the creates after the first -parallel.
	createP99After time.Duration
	armedAtCreate  int
	writes, reads  float64 // per object
	// RSS of the contender's process (-1: no process, the raw floor): idle (ready to protect,
	// nothing protected yet), with n protected objects before the deletes, its peak, and with n
	// protected objects and every finished run retained.
	rssIdle, rssProtected, peak int64
	rssRetained                 int64
	cpu                         time.Duration
	machineBusy                 float64 // the share of all cores busy during the teardown
	// CPU used so far by each process, before the first delete and after the last target went.
	procsBefore, procsAfter processCPU
}

func run(o options) error {
	cs, err := lineup(o)
	if err != nil {
		return err
	}
	var rounds [][]result
	for k := range o.rounds {
		if o.rounds > 1 {
			fmt.Printf("\n##### round %d of %d\n", k+1, o.rounds)
		}
		byName := map[string]result{}
		for _, c := range orderOf(cs, k) {
			fmt.Printf("\n=== %s ===\n", c.name)
			r, err := runOne(o, c, k)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			byName[c.name] = *r
		}
		var results []result // in -contenders order, whatever order they ran in
		for _, c := range cs {
			results = append(results, byName[c.name])
		}
		if len(results) > 1 {
			compare(o, results)
		}
		rounds = append(rounds, results)
	}
	if o.rounds > 1 && len(cs) > 1 {
		summarize(o, rounds)
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
			msg := fmt.Sprintf("  ... %s: %d of %d targets gone", time.Since(start).Round(time.Second), d.count(), o.deletes)
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
		if key, ok := requestKey(m.GetLabel()); ok {
			out[key] += int(m.GetCounter().GetValue())
		}
	}
	// The time the API server spent on them, in microseconds, under "µs <key>".
	for _, m := range families["apiserver_request_duration_seconds"].GetMetric() {
		if key, ok := requestKey(m.GetLabel()); ok {
			out[timeKey+key] += int(m.GetHistogram().GetSampleSum() * 1e6)
		}
	}
	return out, nil
}

// timeKey prefixes the keys of the API server's time per kind of request.
const timeKey = "µs "

// requestKey is "VERB resource[/subresource]" for writes, "read VERB resource" for reads.
func requestKey(labelPairs []*dto.LabelPair) (string, bool) {
	labels := map[string]string{}
	for _, l := range labelPairs {
		labels[l.GetName()] = l.GetValue()
	}
	verb := labels["verb"]
	switch verb {
	case "POST", "PUT", "PATCH", "DELETE", "APPLY":
	case "GET", "LIST":
		verb = "read " + verb
	default:
		return "", false
	}
	key := verb + " " + labels["resource"]
	if labels["subresource"] != "" {
		key += "/" + labels["subresource"]
	}
	return key, true
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

// waitFor checks cond every 20 ms until it holds, it fails, or limit (0: none) passes.
func waitFor(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
	return waitEvery(ctx, limit, 20*time.Millisecond, cond)
}

// waitEvery is waitFor checking cond every interval.
func waitEvery(ctx context.Context, limit, interval time.Duration, cond func() (bool, error)) error {
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
		case <-time.After(interval):
		}
	}
}

// listEvery is how often the benchmark counts the protected targets while n are being created:
// a count lists every target (the peer and the raw floor), and at 100,000 of them listing every
// 20 ms would load the API server the contender shares.
func listEvery(n int) time.Duration {
	return max(20*time.Millisecond, time.Duration(n)*20*time.Microsecond)
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(i, len(sorted))-1)].Round(time.Millisecond)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
