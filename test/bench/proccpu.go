package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// processCPU is the CPU each process of the cluster (and the contender) has used so far, by name.
type processCPU map[string]time.Duration

// clusterPIDs reads the process ids kwokctl recorded for the cluster's components.
func clusterPIDs(dir string) map[string]int {
	pids := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil {
			pids[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
		}
	}
	return pids
}

// sampleCPU reads the CPU used so far by each process in pids.
func sampleCPU(pids map[string]int) processCPU {
	s := processCPU{}
	for name, pid := range pids {
		s[name] = cpuOf(pid)
	}
	return s
}

// printPerObject prints, per process, the CPU it spent between before and after per target,
// largest first: where a teardown's cost lands.
func printPerObject(before, after processCPU, n int) {
	names := make([]string, 0, len(after))
	var total time.Duration
	for name := range after {
		names = append(names, name)
		total += after[name] - before[name]
	}
	slices.SortFunc(names, func(a, b string) int { return int((after[b] - before[b]) - (after[a] - before[a])) })
	per := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(n) }
	fmt.Printf("  CPU per target, by process (ms):            %.2f in all\n", per(total))
	for _, name := range names {
		fmt.Printf("      %-40s %7.2f\n", name, per(after[name]-before[name]))
	}
}

// processes are the cluster's processes, the contender's and the benchmark's own (its deletes and
// its watch).
func (b *bench) processes() map[string]int {
	all := map[string]int{"benchmark (deletes, watch)": os.Getpid()}
	for name, pid := range b.pids {
		all[name] = pid
	}
	if b.proc != nil {
		all[b.contender.name] = b.proc.cmd.Process.Pid
	}
	return all
}
