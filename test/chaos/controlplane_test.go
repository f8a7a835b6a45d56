package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// component is a process of the kwok cluster's control plane (kwokctl's binary runtime): its pid
// file, and the command line and log it was started with.
type component struct {
	name string
	pid  int
	argv []string
	log  string
}

func controlPlane(name string) *component {
	GinkgoHelper()
	dir := filepath.Join(root, "bin", "kwok-state", "clusters", clusterName)
	raw, err := os.ReadFile(filepath.Join(dir, "pids", name+".pid"))
	Expect(err).NotTo(HaveOccurred())
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	Expect(err).NotTo(HaveOccurred())
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	Expect(err).NotTo(HaveOccurred())
	argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	return &component{name: name, pid: pid, argv: argv, log: filepath.Join(dir, "logs", name+".log")}
}

// restart kills the component (SIGKILL: a crash, and no minute-long graceful shutdown) and starts it again with
// the same command line, recording the new pid where kwokctl looks for it.
func (c *component) restart() {
	GinkgoHelper()
	Expect(syscall.Kill(c.pid, syscall.SIGKILL)).To(Succeed())
	Eventually(func() bool { return syscall.Kill(c.pid, 0) != nil }, 60*time.Second, 100*time.Millisecond).Should(BeTrue(), "%s did not stop", c.name)
	logf, err := os.OpenFile(c.log, os.O_APPEND|os.O_WRONLY, 0o644)
	Expect(err).NotTo(HaveOccurred())
	defer logf.Close()
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives the suite's process group, like kwokctl's
	Expect(cmd.Start()).To(Succeed())
	c.pid = cmd.Process.Pid
	go func() { _ = cmd.Wait() }()
	pidFile := filepath.Join(filepath.Dir(filepath.Dir(c.log)), "pids", c.name+".pid")
	Expect(os.WriteFile(pidFile, []byte(strconv.Itoa(c.pid)), 0o644)).To(Succeed())
}

// apiServerReady reports whether the API server answers /readyz.
func apiServerReady() bool {
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "bin", "kubectl"), "--kubeconfig", kubeconfig, "get", "--raw", "/readyz", "--request-timeout=2s")
	cmd.Stdout = &out
	return cmd.Run() == nil && strings.TrimSpace(out.String()) == "ok"
}

// supervisor restarts the operator whenever it exits, as its Deployment would (a leader that
// cannot renew its lease while the API server is away exits), and counts the restarts.
type supervisor struct {
	mu       sync.Mutex
	op       *operator
	restarts int
	stopped  bool
}

func supervise(start func() *operator) *supervisor {
	s := &supervisor{op: start()}
	go func() {
		for {
			s.mu.Lock()
			op := s.op
			s.mu.Unlock()
			<-op.done
			s.mu.Lock()
			if s.stopped {
				s.mu.Unlock()
				return
			}
			s.restarts++
			s.op = start()
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *supervisor) current() *operator {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.op
}

// count is how many times the operator was restarted.
func (s *supervisor) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// stop stops supervising, then the operator.
func (s *supervisor) stop() {
	s.mu.Lock()
	s.stopped = true
	op := s.op
	s.mu.Unlock()
	op.stop()
}

var _ = Describe("API server restart and a paused etcd", func() {
	It("recover without losing or repeating a recorded step", func(ctx SpecContext) {
		objects := sizeFromEnv("CHAOS_CONTROL_PLANE_OBJECTS", 90)
		srv := newFlakyServer()
		DeferCleanup(srv.srv.Close)
		sup := supervise(func() *operator {
			return startOperator("--http-allowed-destinations", strings.TrimPrefix(srv.srv.URL, "http://"))
		})
		DeferCleanup(sup.stop)
		sup.current().waitLeading(time.Minute)
		ns := "chaos-control-plane"
		deployChaos(ctx, ns, srv.srv.URL, objects)
		watch := observe(ctx, ns)
		Expect(k8s.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.HasLabels{"app"})).To(Succeed())

		By("restarting the API server mid pipeline")
		time.Sleep(1500 * time.Millisecond)
		apiserver := controlPlane("kube-apiserver")
		down := time.Now()
		apiserver.restart()
		Eventually(apiServerReady, 2*time.Minute, 200*time.Millisecond).Should(BeTrue())
		up := time.Now()
		Expect(remaining(ctx, ns)).To(BeNumerically(">", 0), "the restart must land mid pipeline")
		apiRecovery := firstGoneAfter(ctx, watch, ns, up)

		By("pausing etcd (SIGSTOP) for 8s mid pipeline")
		Expect(remaining(ctx, ns)).To(BeNumerically(">", 0), "the pause must land mid pipeline")
		etcd := controlPlane("etcd")
		Expect(syscall.Kill(etcd.pid, syscall.SIGSTOP)).To(Succeed())
		time.Sleep(8 * time.Second)
		Expect(syscall.Kill(etcd.pid, syscall.SIGCONT)).To(Succeed())
		resumed := time.Now()
		etcdRecovery := firstGoneAfter(ctx, watch, ns, resumed)

		Eventually(func() int { return remaining(ctx, ns) }, 5*time.Minute, time.Second).Should(BeZero(), "objects stuck after the faults")
		checkKillInvariants(ctx, ns, objects, srv, watch)
		report := fmt.Sprintf("%d objects; API server down %s (restart to /readyz), first object released %s after it answered again; "+
			"etcd paused 8s, first object released %s after it resumed; operator restarts by its supervisor: %d; lost 0, stuck 0, repeated steps 0",
			objects, up.Sub(down).Round(100*time.Millisecond), apiRecovery.Round(100*time.Millisecond), etcdRecovery.Round(100*time.Millisecond), sup.count())
		AddReportEntry("chaos: control plane", report)
		GinkgoWriter.Println(report)
	})
})

// firstGoneAfter waits until an object of ns goes after t (or none is left), and returns how
// long after t that was: the time the operator took to act again.
func firstGoneAfter(ctx context.Context, watch *observer, ns string, t time.Time) time.Duration {
	GinkgoHelper()
	var first time.Time
	Eventually(func() bool {
		watch.mu.Lock()
		defer watch.mu.Unlock()
		for _, at := range watch.goneAt {
			if at.After(t) && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		return !first.IsZero() || remaining(ctx, ns) == 0
	}, 3*time.Minute, 100*time.Millisecond).Should(BeTrue())
	if first.IsZero() {
		return 0
	}
	return first.Sub(t)
}
