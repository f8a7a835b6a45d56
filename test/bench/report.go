package main

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"
)

// rate is the teardown's, in deleted targets a second.
func (r result) rate(o options) float64 { return float64(o.deletes) / r.total.Seconds() }

// armRate is how fast the contender protected the n new targets, in objects a second.
func (r result) armRate(o options) float64 { return float64(o.n) / r.protect.Seconds() }

// rssPerObject is the contender's memory per protected object above its idle memory, in bytes.
func (r result) rssPerObject(o options) int64 { return (r.rssProtected - r.rssIdle) / int64(o.n) }

// measure reads the API server's counters and prints the contender's figures.
// keys are the deleted targets' (b.keys), deletedAt when each was deleted.
func (b *bench) measure(ctx context.Context, r *result, before map[string]int, keys []string, deletedAt []time.Time, goneAt map[string]time.Time) error {
	// Let the last writes (run finalizers, policy status) land before counting.
	time.Sleep(3 * time.Second)
	after, err := writeCounts(ctx, b.cs)
	if err != nil {
		return err
	}
	var lat []time.Duration
	for i, k := range keys {
		lat = append(lat, goneAt[k].Sub(deletedAt[i]))
	}
	slices.Sort(lat)
	r.p50, r.p99 = pct(lat, 50), pct(lat, 99)
	writes := diff(after, before)
	m := len(keys)
	if !b.o.namespace {
		writes["DELETE configmaps"] -= m // the benchmark's own deletes
	}
	if b.contender.name == contenderRaw {
		writes["PATCH configmaps"] -= m // the floor's own releases: the benchmark's too
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
	r.writes, r.reads = float64(opWrites)/float64(m), float64(opReads)/float64(m)
	if b.proc != nil {
		r.peak = b.proc.peak()
	}
	b.print(r, lat, writes)
	switch {
	case b.o.step == stepResource:
		return b.resourceReport(ctx, keys)
	case b.o.step != stepWait && b.proc != nil: // the raw floor has no process, and no log
		return httpReport(ctx, b.ep, b.metrics, b.proc.log.Name(), keys, deletedAt, goneAt)
	}
	return nil
}

func (b *bench) print(r *result, lat []time.Duration, writes map[string]int) {
	targets := describeTargets(b.o)
	switch {
	case b.o.step == stepHTTP:
		fmt.Printf("\nteardown benchmark, %s: %s, one http step (POST to a local server answering after %s), operator defaults + --http-allowed-destinations\n", r.contender, targets, b.o.httpDelay)
	case b.o.step == stepPipeline:
		fmt.Printf("\nteardown benchmark, %s: %s, three steps (wait 0s, http POST to a local server answering after %s, wait 0s), operator defaults + --http-allowed-destinations\n", r.contender, targets, b.o.httpDelay)
	case b.o.step == stepResource && b.contender.jobStep:
		fmt.Printf("\nteardown benchmark, %s: %s, %s, defaults\n", r.contender, targets, describeRecordJob)
	case b.o.step == stepResource:
		fmt.Printf("\nteardown benchmark, %s: %s, %s, defaults\n", r.contender, targets, describeRecord)
	default:
		fmt.Printf("\nteardown benchmark, %s: %s, one wait step (duration 0), defaults\n", r.contender, targets)
	}
	m := b.o.deletes
	fmt.Printf("  protect %d new objects (create to finalizer):  %s  (%.0f objects/s)\n", b.o.n, r.protect.Round(time.Millisecond), r.armRate(b.o))
	fmt.Printf("  create latency p50 / p99:                    %s / %s, p99 after the first %d: %s  (%d of %d creates returned the object armed)\n",
		r.createP50, r.createP99, b.o.parallel, r.createP99After, r.armedAtCreate, b.o.n)
	fmt.Printf("  first delete to last target gone:            %s  (%.0f targets/s)\n", r.total.Round(time.Millisecond), r.rate(b.o))
	fmt.Printf("  delete-to-gone latency p50 / p90 / p99 / max: %s / %s / %s / %s\n",
		r.p50, pct(lat, 90), r.p99, lat[len(lat)-1].Round(time.Millisecond))
	fmt.Printf("  API writes during teardown, per target:      %.2f  (all clients but the benchmark's deletes)\n", r.writes)
	fmt.Printf("  API reads (GET, LIST) per target:            %.2f\n", r.reads)
	for _, k := range slices.Sorted(maps.Keys(writes)) {
		if writes[k] > 0 && !strings.HasPrefix(k, timeKey) {
			fmt.Printf("      %-40s %7d  (%.2f per target, API server time %.1f ms each)\n", k, writes[k],
				float64(writes[k])/float64(m), float64(writes[timeKey+k])/1e3/float64(writes[k]))
		}
	}
	if b.proc != nil {
		fmt.Printf("  memory: RSS before deletes %s, peak RSS (VmHWM) %s\n", mib(r.rssProtected), mib(r.peak))
		fmt.Printf("  memory: RSS idle (ready, nothing protected) %s; RSS per protected object above idle: %d bytes\n",
			mib(r.rssIdle), r.rssPerObject(b.o))
		fmt.Printf("  CPU during teardown: %.1f s (of %.1f s wall, on %d cores shared with the control plane)\n",
			r.cpu.Seconds(), r.total.Seconds(), runtime.NumCPU())
	}
	if r.machineBusy > 0 {
		fmt.Printf("  machine CPU busy during teardown (every process): %.0f%%\n", 100*r.machineBusy)
	}
	if len(r.procsAfter) > 0 {
		printPerObject(r.procsBefore, r.procsAfter, m)
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

// compare prints each contender's figures and their ratio to the hand-written controller's.
func compare(o options, results []result) {
	peer := peerOf(results)
	ratio := func(v float64, of func(result) float64) string {
		if peer == nil {
			return "      "
		}
		return fmt.Sprintf(" %4.2fx", v/of(*peer))
	}
	rate := func(r result) float64 { return r.rate(o) }
	armed := func(r result) float64 { return r.armRate(o) }
	fmt.Printf("\nside by side: %s, %s; ratios are to the hand-written controller (peer)\n", describeTargets(o), describeSteps(o.step))
	fmt.Printf("  %-18s %14s %10s %10s %8s %8s %11s %11s %14s %11s\n",
		"contender", "objects/s", "p50", "p99", "writes", "reads", "peak RSS", "protect", "armed/s", "RSS/object")
	for _, r := range results {
		peak, perObject := "-", "-"
		if r.peak >= 0 {
			peak = mib(r.peak)
		}
		if r.rssIdle >= 0 {
			perObject = fmt.Sprintf("%d B", r.rssPerObject(o))
		}
		fmt.Printf("  %-18s %8.0f%s %10s %10s %8.2f %8.2f %11s %11s %8.0f%s %11s\n",
			r.contender, rate(r), ratio(rate(r), rate), r.p50, r.p99, r.writes, r.reads, peak,
			r.protect.Round(time.Millisecond), armed(r), ratio(armed(r), armed), perObject)
	}
}

// describeSteps says in words what the benchmark policy's steps are.
func describeSteps(step string) string {
	switch step {
	case stepHTTP:
		return "one http step"
	case stepPipeline:
		return "three steps (wait 0s, http, wait 0s)"
	case stepResource:
		return describeRecord + "; " + contenderJob + ": " + describeRecordJob
	}
	return "one wait step (duration 0)"
}

// What -step resource's two forms of the pipeline do.
const (
	describeRecord    = "one resource step (create a record ConfigMap as ServiceAccount " + recorderName + ", impersonated; its condition holds at once)"
	describeRecordJob = "the same as one job step (a Job running kubectl create as " + recorderName + "; kwok runs no container, its pod completes at once)"
)
