package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// httpStepName is the name of the benchmark policy's http step.
const httpStepName = "call"

// httpStep returns the benchmark's http step: a POST to the local server, one URL per target.
func httpStep(addr string) v1alpha1.Step {
	return v1alpha1.Step{Name: httpStepName, HTTP: &v1alpha1.HTTPStep{
		Method:   "POST",
		URL:      "http://" + addr + "/teardown/${object.metadata.name}",
		JSONBody: "{'name': object.metadata.name}",
	}}
}

// request is one request the local server received.
type request struct {
	at  time.Time
	key string // Idempotency-Key
}

// endpoint is the external API the http step calls: it answers 200 with a small JSON body and
// records, per target, when each request came and with which Idempotency-Key.
type endpoint struct {
	ln    net.Listener
	srv   *http.Server
	delay time.Duration // before each answer

	mu     sync.Mutex
	byName map[string][]request
	bad    []string // requests that name no target, or whose body does not match the path
}

func startEndpoint(delay time.Duration) (*endpoint, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &endpoint{ln: ln, delay: delay, byName: map[string][]request{}}
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

func (e *endpoint) addr() string { return e.ln.Addr().String() }

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	name, ok := strings.CutPrefix(r.URL.Path, "/teardown/")
	var body struct {
		Name string `json:"name"`
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	e.mu.Lock()
	switch {
	case !ok || r.Method != http.MethodPost:
		e.bad = append(e.bad, fmt.Sprintf("%s %s", r.Method, r.URL.Path))
	case err != nil || body.Name != name:
		e.bad = append(e.bad, fmt.Sprintf("%s %s: body %q", r.Method, r.URL.Path, raw))
	}
	if ok {
		e.byName[name] = append(e.byName[name], request{at: at, key: r.Header.Get("Idempotency-Key")})
	}
	e.mu.Unlock()
	if e.delay > 0 {
		select {
		case <-time.After(e.delay):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	quoted, _ := json.Marshal(name)
	_, _ = io.WriteString(w, `{"status":"deleted","name":`+string(quoted)+`}`)
}

func (e *endpoint) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
}

// requests returns a copy of what the server received, by target name.
func (e *endpoint) requests() (map[string][]request, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string][]request, len(e.byName))
	for k, v := range e.byName {
		out[k] = append([]request(nil), v...)
	}
	return out, append([]string(nil), e.bad...)
}

// freeAddr returns a loopback address with a port free at the time of the call.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}

// httpReport prints the http mode's own figures: requests, duplicates, where the time of a
// deletion goes, and the operator's own measure of the step.
func httpReport(ctx context.Context, ep *endpoint, metricsAddr, logPath string, keys []string, deletedAt []time.Time, goneAt map[string]time.Time) error {
	reqs, bad := ep.requests()
	total, dups, missing, keyMismatch := 0, 0, 0, 0
	var queued, completion []time.Duration
	var dupNames []string
	for i, k := range keys {
		n := name(i)
		rs := reqs[n]
		total += len(rs)
		if len(rs) == 0 {
			missing++
			continue
		}
		if len(rs) > 1 {
			dups++
			dupNames = append(dupNames, n)
		}
		for _, r := range rs {
			if !strings.HasSuffix(r.key, "-"+httpStepName) {
				keyMismatch++
			}
		}
		first := rs[0].at
		queued = append(queued, first.Sub(deletedAt[i]))
		if g, ok := goneAt[k]; ok {
			completion = append(completion, g.Sub(first))
		}
	}
	for k, rs := range reqs {
		if !strings.HasPrefix(k, "target-") {
			total += len(rs)
		}
	}
	sortDurations(queued)
	sortDurations(completion)

	fmt.Printf("  http step: requests received %d for %d targets; targets with more than one request (duplicates): %d; targets with none: %d\n",
		total, len(keys), dups, missing)
	if len(dupNames) > 0 {
		sort.Strings(dupNames)
		for _, n := range dupNames[:min(len(dupNames), 10)] {
			var parts []string
			for _, r := range reqs[n] {
				parts = append(parts, fmt.Sprintf("%s key=%s", r.at.Format("15:04:05.000"), r.key))
			}
			fmt.Printf("      duplicate %s: %s\n", n, strings.Join(parts, "; "))
		}
	}
	if len(bad) > 0 || keyMismatch > 0 {
		fmt.Printf("      unexpected requests: %d; requests without an Idempotency-Key ending in -%s: %d\n", len(bad), httpStepName, keyMismatch)
		for _, b := range bad[:min(len(bad), 10)] {
			fmt.Printf("      unexpected: %s\n", b)
		}
	}
	if len(queued) > 0 {
		fmt.Printf("  delete to request received p50 / p99 / max:  %s / %s / %s  (queueing before the step runs)\n",
			pct(queued, 50), pct(queued, 99), queued[len(queued)-1].Round(time.Millisecond))
	}
	if len(completion) > 0 {
		fmt.Printf("  request received to gone p50 / p99 / max:    %s / %s / %s  (step completion, status write, release)\n",
			pct(completion, 50), pct(completion, 99), completion[len(completion)-1].Round(time.Millisecond))
	}

	printStepDuration(ctx, metricsAddr, "http", httpStepName)
	printLogErrors(logPath)
	return nil
}

// printStepDuration prints the operator's own measure of the step, of the given kind, by phase.
func printStepDuration(ctx context.Context, metricsAddr, kind, step string) {
	hist, err := scrapeStepHistogram(ctx, metricsAddr, step)
	if err != nil {
		fmt.Printf("  %s step duration (operator metric): unavailable: %v\n", kind, err)
		return
	}
	phases := make([]string, 0, len(hist))
	for ph := range hist {
		phases = append(phases, ph)
	}
	sort.Strings(phases)
	if len(phases) == 0 {
		fmt.Printf("  %s step duration (operator metric): no observations of step %q\n", kind, step)
	}
	for _, ph := range phases {
		h := hist[ph]
		fmt.Printf("  %s step duration, operator's teardown_step_duration_seconds{step=%q,phase=%q}: %d observations, mean %s,\n",
			kind, step, ph, h.count, secs(h.sum/float64(max(h.count, 1))))
		fmt.Printf("      p50 / p99 %s / %s  (bucket-interpolated: linear inside the bucket; %s)\n",
			secs(h.quantile(0.50)), secs(h.quantile(0.99)), h.describe())
	}
}

// printLogErrors prints how many error lines the operator logged, and the first few.
func printLogErrors(logPath string) {
	n, first, err := logErrors(logPath)
	if err != nil {
		fmt.Printf("  operator log: %v\n", err)
		return
	}
	fmt.Printf("  operator log: %d error lines\n", n)
	for _, l := range first {
		fmt.Printf("      %s\n", l)
	}
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

func secs(s float64) string {
	if math.IsNaN(s) {
		return "n/a"
	}
	return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond).String()
}

// histogram is one cumulative Prometheus histogram.
type histogram struct {
	bounds []float64 // upper bounds, ascending, +Inf excluded
	cum    []uint64  // cumulative counts per bound
	count  uint64
	sum    float64
}

// quantile estimates the q-quantile the way histogram_quantile does: find the bucket holding
// rank q*count and interpolate linearly between its lower and upper bound (the first bucket's
// lower bound is 0; a rank in the +Inf bucket gives the highest finite bound).
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.count)
	prevBound, prevCum := 0.0, uint64(0)
	for i, b := range h.bounds {
		if float64(h.cum[i]) >= rank {
			inBucket := h.cum[i] - prevCum
			if inBucket == 0 {
				return b
			}
			return prevBound + (b-prevBound)*(rank-float64(prevCum))/float64(inBucket)
		}
		prevBound, prevCum = b, h.cum[i]
	}
	if len(h.bounds) == 0 {
		return math.NaN()
	}
	return h.bounds[len(h.bounds)-1]
}

// describe lists the non-empty buckets, as "≤bound: count".
func (h histogram) describe() string {
	var parts []string
	prev := uint64(0)
	for i, b := range h.bounds {
		if c := h.cum[i] - prev; c > 0 {
			parts = append(parts, fmt.Sprintf("≤%.3gs: %d", b, c))
		}
		prev = h.cum[i]
	}
	if c := h.count - prev; c > 0 {
		parts = append(parts, fmt.Sprintf(">%.3gs: %d", h.bounds[len(h.bounds)-1], c))
	}
	return "buckets " + strings.Join(parts, ", ")
}

// scrapeStepHistogram reads the operator's teardown_step_duration_seconds for the bench's step
// of that name, by phase.
func scrapeStepHistogram(ctx context.Context, addr, step string) (map[string]histogram, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing operator metrics: %w", err)
	}
	fam := families["teardown_step_duration_seconds"]
	if fam == nil {
		return nil, errors.New("operator exposes no teardown_step_duration_seconds")
	}
	out := map[string]histogram{}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["step"] != step {
			continue
		}
		ph := m.GetHistogram()
		h := out[labels["phase"]]
		h.count += ph.GetSampleCount()
		h.sum += ph.GetSampleSum()
		for i, b := range ph.GetBucket() {
			if math.IsInf(b.GetUpperBound(), 1) {
				continue
			}
			if i >= len(h.bounds) {
				h.bounds = append(h.bounds, b.GetUpperBound())
				h.cum = append(h.cum, 0)
			}
			h.cum[i] += b.GetCumulativeCount()
		}
		out[labels["phase"]] = h
	}
	return out, nil
}

// logErrors counts the operator's error log lines and returns the first few.
func logErrors(path string) (int, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = f.Close() }()
	n := 0
	var first []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, `"level":"error"`) || strings.Contains(l, "\tERROR\t") {
			n++
			if len(first) < 5 {
				first = append(first, l[:min(len(l), 400)])
			}
		}
	}
	return n, first, sc.Err()
}
