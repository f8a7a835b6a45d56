package main

import (
	"fmt"
	"slices"
	"strings"
)

// lineup resolves -contenders, in order.
func lineup(o options) ([]contender, error) {
	var cs []contender
	for _, name := range strings.Split(o.contenders, ",") {
		c, ok := contenders()[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("-contenders: no contender %q (raw, peer, operator, operator-all, operator-job, operator-late)", name)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// orderOf is the order the contenders run in, in round k (from 0): every other round reversed, so
// that no contender always runs first, on a machine that no earlier cluster has just worked.
func orderOf(cs []contender, k int) []contender {
	out := slices.Clone(cs)
	if k%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// cpuPerObject is the CPU every process of the machine spent per deleted target, in ms.
func (r result) cpuPerObject(o options) float64 {
	var total float64
	for name, after := range r.procsAfter {
		total += (after - r.procsBefore[name]).Seconds()
	}
	return total * 1000 / float64(o.deletes)
}

// median of vs (the mean of the middle two for an even count); vs is sorted in place.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	m := len(vs) / 2
	if len(vs)%2 == 0 {
		return (vs[m-1] + vs[m]) / 2
	}
	return vs[m]
}

// summarize prints, for each contender, the median over the rounds of its ratios to the peer of the
// same round: objects/s, p99, CPU per object of the whole machine, peak RSS, objects armed a
// second and the p99 of their creates.
func summarize(o options, rounds [][]result) {
	fmt.Printf("\nover %d rounds (order alternating): medians of each round's ratio to that round's peer\n", len(rounds))
	fmt.Printf("  %-18s %12s %12s %16s %12s %12s %12s\n", "contender", "objects/s", "p99", "CPU per object", "peak RSS", "armed/s", "create p99")
	metrics := []func(result) float64{
		func(r result) float64 { return r.rate(o) },
		func(r result) float64 { return r.p99.Seconds() },
		func(r result) float64 { return r.cpuPerObject(o) },
		func(r result) float64 { return float64(r.peak) },
		func(r result) float64 { return r.armRate(o) },
		func(r result) float64 { return r.createP99.Seconds() },
	}
	for i, first := range rounds[0] {
		line := fmt.Sprintf("  %-18s", first.contender)
		for j, metric := range metrics {
			var ratios []float64
			for _, round := range rounds {
				if peer := peerOf(round); peer != nil && metric(*peer) > 0 {
					ratios = append(ratios, metric(round[i])/metric(*peer))
				}
			}
			width := []int{12, 12, 16, 12, 12, 12}[j]
			line += fmt.Sprintf(" %*s", width, fmt.Sprintf("%.2fx", median(ratios)))
		}
		fmt.Println(line)
	}
}

// peerOf is the hand-written controller's result in a round, if it ran.
func peerOf(results []result) *result {
	for i := range results {
		if results[i].contender == contenderPeer {
			return &results[i]
		}
	}
	return nil
}
