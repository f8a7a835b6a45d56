package chaos

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/teardown-dev/teardown-operator/test/framework"
	"k8s.io/client-go/tools/clientcmd"
)

// operator is one run of the operator binary, with its defaults (leader election included).
type operator struct {
	cmd *exec.Cmd
	log *framework.SyncBuffer
	// started is when the process started; leading when it acquired the lease.
	started, leading time.Time
	// done is closed once the process has exited.
	done chan struct{}
	// acting is the log line that says the process acts: it leads, or its workers started.
	acting string
}

// startOperator starts the operator binary; extra are flags beyond the suite's.
func startOperator(extra ...string) *operator {
	return startOperatorWith(kubeconfig, extra...)
}

// startOperatorAs starts the operator binary acting as user (impersonation, with the cluster
// admin's rights), so that the audit log tells its writes from another process's.
func startOperatorAs(user string, extra ...string) *operator {
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	for _, a := range kc.AuthInfos {
		a.Impersonate, a.ImpersonateGroups = user, []string{"system:masters"}
	}
	path := filepath.Join(GinkgoT().TempDir(), user+".kubeconfig")
	Expect(clientcmd.WriteToFile(*kc, path)).To(Succeed())
	return startOperatorWith(path, extra...)
}

// started counts the operator processes the suite started, to name their logs.
var started atomic.Int32

func startOperatorWith(kubeconfig string, extra ...string) *operator {
	return launch(operatorBin, nil, kubeconfig, extra...)
}

// launch starts bin (the operator, or its build with crash points) with env added to the suite's
// environment.
func launch(bin string, env []string, kubeconfig string, extra ...string) *operator {
	// Plain HTTP metrics on loopback: the soak scrapes them without a token.
	args := append([]string{"--kubeconfig", kubeconfig, "--run-namespace", runNamespace,
		"--metrics-bind-address", "127.0.0.1:0", "--metrics-secure=false", "--health-probe-bind-address", "127.0.0.1:0"}, extra...)
	o := &operator{cmd: exec.Command(bin, args...), log: &framework.SyncBuffer{}, acting: "Successfully acquired lease"}
	o.cmd.Env = append(os.Environ(), env...)
	if slices.Contains(extra, "--leader-elect=false") {
		o.acting = "Starting workers" // no lease to wait for: it acts once its controllers start
	}
	file, err := os.Create(filepath.Join(logDir, fmt.Sprintf("%s-%02d-%s.log", time.Now().Format("150405"), started.Add(1), filepath.Base(kubeconfig))))
	Expect(err).NotTo(HaveOccurred())
	o.cmd.Stdout = io.MultiWriter(o.log, file)
	o.cmd.Stderr = o.cmd.Stdout
	Expect(o.cmd.Start()).To(Succeed())
	o.started = time.Now()
	o.done = make(chan struct{})
	go func() {
		_ = o.cmd.Wait()
		_ = file.Close()
		close(o.done)
	}()
	return o
}

// waitLeading waits until the operator acts (it acquired the leader election lease, or started its
// workers without leader election), and returns how long that took from its start.
func (o *operator) waitLeading(timeout time.Duration) time.Duration {
	Eventually(func() bool { return strings.Contains(o.log.String(), o.acting) }, timeout, 50*time.Millisecond).
		Should(BeTrue(), func() string { return "the operator did not start acting; its log:\n" + o.log.String() })
	if o.leading.IsZero() {
		o.leading = time.Now()
	}
	return o.leading.Sub(o.started)
}

// kill ends the operator with SIGKILL: no cleanup, no lease release.
func (o *operator) kill() {
	_ = o.cmd.Process.Signal(syscall.SIGKILL)
	<-o.done
}

// pause stops the process (SIGSTOP) and resume lets it go on (SIGCONT).
func (o *operator) pause()  { _ = o.cmd.Process.Signal(syscall.SIGSTOP) }
func (o *operator) resume() { _ = o.cmd.Process.Signal(syscall.SIGCONT) }

// leads reports whether the operator has acquired the lease (it does not let go of it but by
// exiting).
func (o *operator) leads() bool {
	return strings.Contains(o.log.String(), "Successfully acquired lease")
}

// exited reports whether the process has ended.
func (o *operator) exited() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// stop ends the operator as Kubernetes would (SIGTERM), letting it release its lease.
func (o *operator) stop() {
	if !o.exited() {
		_ = o.cmd.Process.Signal(syscall.SIGCONT)
		_ = o.cmd.Process.Signal(syscall.SIGTERM)
		<-o.done
	}
}
