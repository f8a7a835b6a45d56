package realnode

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	. "github.com/onsi/gomega"

	"github.com/teardown-dev/teardown-operator/test/framework"
)

// What the suite reads off the host: the node is this machine, so a container's process, its
// user and its mounts are in /proc, as they would be on any node.

// containerPID finds the host pid of the process a container runs (its container ID, without
// the runtime prefix, is in the process' cgroup path), or 0.
func containerPID(containerID string) int {
	id := containerID[strings.Index(containerID, "://")+3:]
	procs, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cgroup"))
		if err == nil && strings.Contains(string(cg), id) && processExe(pid) != "pause" {
			return pid
		}
	}
	return 0
}

// processExe is the base name of a process' executable, "" when it is gone.
func processExe(pid int) string {
	exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	if err != nil {
		return ""
	}
	return filepath.Base(exe)
}

// processIDs returns a process' real, effective, saved and filesystem user IDs.
func processIDs(pid int, field string) []string {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, field+":") {
			return strings.Fields(strings.TrimPrefix(line, field+":"))
		}
	}
	return nil
}

// rootMountOptions returns the mount options of "/" as the process sees it.
func rootMountOptions(pid int) []string {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "mountinfo"))
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	var opts []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent major:minor root mountpoint options ...; the last "/" is the one in effect.
		if fields := strings.Fields(s.Text()); len(fields) > 5 && fields[4] == "/" {
			opts = strings.Split(fields[5], ",")
		}
	}
	return opts
}

// auditEvent is what the suite reads of one kube-apiserver audit event.
type auditEvent struct {
	Verb       string   `json:"verb"`
	RequestURI string   `json:"requestURI"`
	UserAgent  string   `json:"userAgent"`
	SourceIPs  []string `json:"sourceIPs"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// auditEvents returns the audit log's events for which keep is true.
func auditEvents(keep func(auditEvent) bool) []auditEvent {
	var out []auditEvent
	Expect(framework.ReadAudit(root, framework.RealNodeCluster, 16<<20, func(ev *auditEvent) {
		if keep(*ev) {
			out = append(out, *ev)
		}
	})).To(Succeed())
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

// hostState is what a real node may change on the host and must put back: the kernel settings
// the kubelet sets, the kubelet's iptables chains, and host paths the kubelet and CNI use.
type hostState struct {
	sysctls map[string]string
	chains  []string
	paths   []string
}

// readHost reads the host's state.
func readHost() hostState {
	h := hostState{sysctls: map[string]string{}}
	for _, k := range []string{"kernel.panic_on_oops", "kernel.panic", "vm.overcommit_memory", "vm.panic_on_oom", "net.ipv4.ip_forward"} {
		raw, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(k, ".", "/"))
		Expect(err).NotTo(HaveOccurred())
		h.sysctls[k] = strings.TrimSpace(string(raw))
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle"} {
			out, _ := exec.Command(fam, "-t", table, "-S").Output()
			for _, line := range strings.Split(string(out), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "-N" && (strings.HasPrefix(f[1], "KUBE-") || f[1] == "TEARDOWN-NODE") {
					h.chains = append(h.chains, fam+" "+table+" "+f[1])
				}
			}
		}
	}
	for _, p := range []string{"/var/lib/kubelet", "/var/lib/cni", "/var/log/containers", "/var/log/pods"} {
		if _, err := os.Stat(p); err == nil {
			h.paths = append(h.paths, p)
		}
	}
	return h
}

// nodeLeftovers lists what of the real node is left on the host, against the host as it was
// before: its bridge, its state directories and mounts, its cgroups, its processes, and any
// change of hostState (see test/cluster/node-lib.sh).
func nodeLeftovers(before hostState) []string {
	var left []string
	after := readHost()
	for k, v := range before.sysctls {
		if after.sysctls[k] != v {
			left = append(left, fmt.Sprintf("sysctl %s=%s (was %s)", k, after.sysctls[k], v))
		}
	}
	for _, c := range after.chains {
		if !slices.Contains(before.chains, c) {
			left = append(left, "chain "+c)
		}
	}
	for _, p := range after.paths {
		if !slices.Contains(before.paths, p) {
			left = append(left, "path "+p)
		}
	}
	if _, err := os.Stat("/sys/class/net/tdnode0"); err == nil {
		left = append(left, "bridge tdnode0")
	}
	for _, dir := range []string{"/var/lib/teardown-node", "/run/teardown-node"} {
		if _, err := os.Stat(dir); err == nil {
			left = append(left, "directory "+dir)
		}
		if mounts, err := os.ReadFile("/proc/self/mounts"); err == nil && strings.Contains(string(mounts), " "+dir) {
			left = append(left, "mounts under "+dir)
		}
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/teardown-node")
	if _, err := os.Stat("/sys/fs/cgroup/teardown-node"); err == nil {
		cgroups = append(cgroups, "/sys/fs/cgroup/teardown-node")
	}
	for _, cg := range cgroups {
		left = append(left, "cgroup "+cg)
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		cmd, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), "teardown-node") && !strings.Contains(string(cmd), "kwok") {
			left = append(left, "process "+p.Name()+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return left
}
