// Package realnode proves on a real node what kwok can only simulate: the operator installed
// with its Helm chart as docs/operating.md says, its pods started by a kubelet with containerd
// and runc, ready through their real probes and talking to the API server with in-cluster
// credentials; Job steps whose containers really run, fail, log and get killed; and the uninstall
// hook's drain running in its container as its ServiceAccount. test/cluster/node-up.sh makes
// the node; docs/development.md ("A real node") says what it cannot do.
package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/test/framework"
)

const (
	// release and namespace are the ones docs/operating.md installs with.
	release   = "teardown-operator"
	namespace = "teardown-system"
	// busybox is hack/nodeimages' image, imported by node-up.sh: the Job steps' shell.
	busybox = "teardown.dev/busybox:local"
)

var (
	root       = filepath.Join("..", "..")
	kubeconfig string
	k8s        client.Client
	clientset  kubernetes.Interface
	probe      framework.Probe
	failed     bool
	// hostBefore is the host before the suite's node: node-down must leave it so.
	hostBefore hostState
)

func TestRealNode(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Real Node Suite (kubelet, containerd)")
}

var _ = BeforeSuite(func() {
	failed = true // until the suite's cluster is up: AfterSuite then shows what went wrong
	version := appVersion()
	By("removing what a failed earlier run may have left")
	Expect(framework.StopRealNode(root)).To(Succeed())
	hostBefore = readHost()

	By("a node-up that fails half way (an image that is not there), then node-down: nothing is left")
	_, err := framework.StartRealNode(root, "NODE_IMAGES=/nonexistent/image.tar")
	Expect(err).To(MatchError(ContainSubstring("image tarball /nonexistent/image.tar: no such file")))
	Expect(nodeLeftovers(hostBefore)).To(ContainElements("bridge tdnode0", "chain iptables nat TEARDOWN-NODE", "directory /run/teardown-node"))
	Expect(framework.StopRealNode(root)).To(Succeed())
	Expect(nodeLeftovers(hostBefore)).To(BeEmpty())

	By("starting the cluster with a real node")
	// The operator image is also named as the registry of docs/operating.md's install command.
	kubeconfig, err = framework.StartRealNode(root,
		"AUDIT_POLICY="+must(filepath.Abs("audit-policy.yaml")),
		fmt.Sprintf("NODE_IMAGE_ALIASES=ghcr.io/teardown-dev/teardown-operator:%s=registry.example.com/teardown-operator:%s", version, version))
	Expect(err).NotTo(HaveOccurred())
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	k8s, err = framework.Client(cfg)
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	probe = framework.Probe{Client: k8s}
	failed = false
})

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		failed = true
	}
})

var _ = AfterSuite(func() {
	if failed {
		out, _ := shell(context.Background(), "kubectl get pods -A -o wide; kubectl get events -A --sort-by=.lastTimestamp | tail -40")
		GinkgoWriter.Printf("cluster at failure:\n%s\nkubelet and containerd logs: %s\n", out, framework.RealNodeLogs(root))
	}
	if os.Getenv("KEEP_NODE") != "" {
		GinkgoWriter.Printf("KEEP_NODE: the real node stays; export KUBECONFIG=%s; test/cluster/node-down.sh removes it\n", kubeconfig)
		return
	}
	Expect(framework.StopRealNode(root)).To(Succeed())
	Expect(nodeLeftovers(hostBefore)).To(BeEmpty(), "node-down removes everything the node added to the host")
})

// appVersion is the chart's appVersion, the tag make image gives the operator image.
func appVersion() string {
	raw, err := os.ReadFile(filepath.Join(root, "charts", "teardown-operator", "Chart.yaml"))
	Expect(err).NotTo(HaveOccurred())
	m := regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?`).FindSubmatch(raw)
	Expect(m).NotTo(BeNil(), "appVersion in Chart.yaml")
	return string(m[1])
}

// shell runs script with bash in the repository root, bin/ first on PATH (kubectl, helm) and
// KUBECONFIG set, as a user following the docs would, and returns its combined output.
func shell(ctx context.Context, script string) (string, error) {
	out, err := shellCommand(ctx, script).CombinedOutput()
	return string(out), err
}

// shellCommand is the command shell runs, for one to run in the background.
func shellCommand(ctx context.Context, script string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = root
	bin := must(filepath.Abs(filepath.Join(root, "bin")))
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)
	return cmd
}

// docCommands returns the commands of the first sh block after heading in docs/operating.md,
// one per entry, continuation lines joined.
func docCommands(heading string) []string { return docBlock(heading, 0) }

// docBlock returns the commands of the n-th (from 0) sh block after heading in docs/operating.md.
func docBlock(heading string, n int) []string {
	raw, err := os.ReadFile(filepath.Join(root, "docs", "operating.md"))
	Expect(err).NotTo(HaveOccurred())
	text := string(raw)
	i := strings.Index(text, "\n"+heading+"\n")
	Expect(i).To(BeNumerically(">=", 0), "heading %q in docs/operating.md", heading)
	text = text[i:]
	for ; ; n-- {
		start := strings.Index(text, "```sh\n")
		Expect(start).To(BeNumerically(">=", 0), "sh block %d after %q", n, heading)
		text = text[start+len("```sh\n"):]
		if n == 0 {
			break
		}
		text = text[strings.Index(text, "```")+3:]
	}
	text = text[:strings.Index(text, "```")]
	var cmds []string
	for _, line := range strings.Split(strings.ReplaceAll(text, "\\\n", " "), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			cmds = append(cmds, line)
		}
	}
	return cmds
}

func must[T any](v T, err error) T {
	Expect(err).NotTo(HaveOccurred())
	return v
}
