package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
)

// profiler captures the operator's CPU profile during a teardown, and its allocations, from its
// --pprof-bind-address.
type profiler struct {
	addr, dir string
	apiFile   string // the API server's profile, named after the contender
	done      chan error
	apiserver chan error
	peakErr   error // taking the heap profile before the deletes
}

// startProfile takes the operator's heap in use (every target protected, none deleted yet), then
// begins a CPU profile of d of the operator and of the API server; report collects them.
func startProfile(ctx context.Context, cs kubernetes.Interface, contender, addr, dir string, d time.Duration) *profiler {
	p := &profiler{addr: addr, dir: dir, apiFile: "bench-apiserver." + contender + ".cpu.pprof",
		done: make(chan error, 1), apiserver: make(chan error, 1)}
	if addr != "" {
		// gc=1: live memory, as after a collection, not what the next one would free.
		p.peakErr = fetch(ctx, "http://"+addr+"/debug/pprof/heap?gc=1", filepath.Join(dir, "bench-operator.protected-heap.pprof"))
	}
	go func() {
		if addr == "" { // not the operator: the API server's profile alone
			p.done <- nil
			return
		}
		p.done <- fetch(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())), filepath.Join(dir, "bench-operator.cpu.pprof"))
	}()
	go func() {
		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", fmt.Sprint(int(d.Seconds()))).
			Timeout(d + time.Minute).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, p.apiFile), raw, 0o644)
		}
		p.apiserver <- err
	}()
	return p
}

// report waits for the CPU profile, takes the allocation profile, and prints the top of both.
func (p *profiler) report(ctx context.Context) error {
	if err := <-p.done; err != nil {
		return fmt.Errorf("CPU profile: %w", err)
	}
	if err := <-p.apiserver; err != nil {
		return fmt.Errorf("API server CPU profile: %w", err)
	}
	views := []struct{ title, file, sample string }{
		{"the API server's CPU during the teardown (cumulative)", p.apiFile, ""},
	}
	if p.addr != "" {
		if p.peakErr != nil {
			return fmt.Errorf("heap profile with every target protected: %w", p.peakErr)
		}
		heap := filepath.Join(p.dir, "bench-operator.heap.pprof")
		if err := fetch(ctx, "http://"+p.addr+"/debug/pprof/heap", heap); err != nil {
			return fmt.Errorf("heap profile: %w", err)
		}
		views = append(views, struct{ title, file, sample string }{"the operator's CPU during the teardown (cumulative)", "bench-operator.cpu.pprof", ""},
			struct{ title, file, sample string }{"the operator's allocations since start, by function (cumulative)", "bench-operator.heap.pprof", "-sample_index=alloc_space"},
			struct{ title, file, sample string }{"the operator's memory in use with every target protected, by function (cumulative)", "bench-operator.protected-heap.pprof", "-sample_index=inuse_space"})
	}
	for _, view := range views {
		args := []string{"tool", "pprof", "-top", "-cum", "-nodecount=30"}
		if view.sample != "" {
			args = append(args, view.sample)
		}
		out, err := exec.CommandContext(ctx, "go", append(args, filepath.Join(p.dir, view.file))...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("go tool pprof: %v: %s", err, out)
		}
		fmt.Printf("\n%s (%s):\n%s", view.title, filepath.Join(p.dir, view.file), out)
	}
	return nil
}

func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = io.Copy(f, resp.Body)
	return err
}
