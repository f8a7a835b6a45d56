package realnode

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
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
	f, err := os.Open(filepath.Join(framework.ClusterLogs(root, framework.RealNodeCluster), "audit.log"))
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	var out []auditEvent
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 16<<20)
	for s.Scan() {
		var ev auditEvent
		if json.Unmarshal(s.Bytes(), &ev) == nil && keep(ev) {
			out = append(out, ev)
		}
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }
