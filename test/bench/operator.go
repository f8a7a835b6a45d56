package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// process is a controller process under test: the operator or the peer.
type process struct {
	cmd *exec.Cmd
	log *os.File
}

// startOperator starts the operator with the benchmark's base flags, then modeArgs, then the
// user's -operator-args.
func startOperator(o options, kubeconfig string, modeArgs []string) (*process, error) {
	// Plain HTTP metrics on loopback: the benchmark scrapes them without a token.
	args := []string{"--kubeconfig", kubeconfig, "--run-namespace", "teardown-system",
		"--metrics-bind-address", "127.0.0.1:0", "--metrics-secure=false", "--health-probe-bind-address", "127.0.0.1:0"}
	args = append(args, modeArgs...)
	args = append(args, strings.Fields(o.extraArgs)...)
	return startProcess(filepath.Join(o.root, "bin", "bench-operator.log"), o.operatorBin, args...)
}

// startProcess runs bin with args, its output in logPath.
func startProcess(logPath, bin string, args ...string) (*process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	fmt.Printf("%s pid %d, log %s\n", filepath.Base(bin), cmd.Process.Pid, logPath)
	return &process{cmd: cmd, log: f}, nil
}

func (op *process) stop() {
	_ = op.cmd.Process.Signal(os.Interrupt)
	_ = op.cmd.Wait()
	_ = op.log.Close()
}

func (op *process) rss() int64  { return procStatus(op.cmd.Process.Pid, "VmRSS") }
func (op *process) peak() int64 { return procStatus(op.cmd.Process.Pid, "VmHWM") }

// cpu returns the process's user and system CPU time so far.
func (op *process) cpu() time.Duration { return cpuOf(op.cmd.Process.Pid) }

// cpuOf returns a process's user and system CPU time so far, from /proc/<pid>/stat.
func cpuOf(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// procStatus reads a memory figure (in bytes) from /proc/<pid>/status.
func procStatus(pid int, field string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return -1
}

// machineCPU returns the time all cores have spent busy and in total so far, from /proc/stat.
func machineCPU() (busy, total time.Duration) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	const clockTicks = 100
	for i, f := range fields[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		d := time.Duration(v) * time.Second / clockTicks
		total += d
		if i != 3 && i != 4 { // idle, iowait
			busy += d
		}
	}
	return busy, total
}
