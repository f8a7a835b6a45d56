package chaos

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// buildRevision builds the operator of a git revision, from a worktree of this repository, and
// returns it with the directory of that revision's CRDs.
func buildRevision(rev string) (bin, crds string) {
	GinkgoHelper()
	dir := filepath.Join(GinkgoT().TempDir(), "src")
	remove, err := framework.Worktree(root, rev, dir)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(remove)
	bin = filepath.Join(GinkgoT().TempDir(), "teardown-operator-previous")
	build := exec.Command("go", "build", "-o", bin, "./cmd/teardown-operator")
	build.Dir = dir
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	crds = GinkgoT().TempDir()
	out, err = exec.Command("cp", "-r", filepath.Join(dir, "config", "crd", "bases")+"/.", crds).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	return bin, crds
}

// release is an operator binary and the CRDs it was released with: an upgrade or a rollback
// (helm) changes both.
type release struct{ bin, crds string }

// install makes rel's CRDs the cluster's.
func (rel release) install(ctx context.Context) {
	GinkgoHelper()
	Expect(framework.InstallCRDs(ctx, k8s, rel.crds)).To(Succeed())
}

var _ = Describe("Upgrade and downgrade mid pipeline", Ordered, func() {
	var previous, current release
	var rev string
	BeforeAll(func() {
		var err error
		rev, err = framework.PreviousRevision(root)
		Expect(err).NotTo(HaveOccurred())
		previous.bin, previous.crds = buildRevision(rev)
		current = release{bin: operatorBin, crds: filepath.Join(root, "config", "crd", "bases")}
		DeferCleanup(func(ctx context.Context) { current.install(ctx) })
	})

	// The previous release's shutdown could lose the record of a first pass in flight (its http
	// call answered, the run not created yet): the next replica calls again, with the same key.
	It("finishes under this release the teardowns the previous one started", func(ctx SpecContext) {
		By("from " + rev)
		handover(ctx, "upgrade-"+runID(), previous, current, 2)
	})

	// This release records what a pass did before it stops: nothing is called twice.
	It("finishes under the previous release the teardowns this one started, nothing repeated", func(ctx SpecContext) {
		By("back to " + rev)
		handover(ctx, "downgrade-"+runID(), current, previous, 1)
	})
})

// handover tears down 6 objects: the release first takes them up and is stopped (SIGTERM, as a
// rollout stops a pod) while every pipeline is in flight, the last one's first call unanswered;
// the release second, its CRDs installed as helm upgrade or rollback installs them, finishes them. Each http step is called at most maxCalls times, always
// with the same Idempotency-Key; each Job is created once.
func handover(ctx context.Context, ns string, first, second release, maxCalls int) {
	GinkgoHelper()
	srv, flags := steadyServer()
	first.install(ctx)
	op := launch(first.bin, nil, kubeconfig, flags...)
	op.waitLeading(time.Minute)
	names := []string{"o-0", "o-1", "o-2", "o-3", "o-4", "o-5"}
	watch := deployHandover(ctx, ns, srv, names)
	// The first operator is stopped the moment the last object's first call reaches the server,
	// before its answer: that pass is cut short by the shutdown.
	var notified atomic.Int32
	srv.arrived = func(path string) {
		if strings.Contains(path, "/u/notify/") && notified.Add(1) == int32(len(names)) {
			_ = op.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	Expect(k8s.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.HasLabels{"app"})).To(Succeed())
	Eventually(op.done, time.Minute).Should(BeClosed(), "the first operator did not stop")
	Expect(remaining(ctx, ns)).To(Equal(len(names)), "an object was released before the handover")

	second.install(ctx)
	next := launch(second.bin, nil, kubeconfig, flags...)
	DeferCleanup(next.stop)
	Eventually(func() int { return remaining(ctx, ns) }, 2*time.Minute, 200*time.Millisecond).Should(BeZero(), "objects left after the handover")
	var runs v1alpha1.TeardownRunList
	Expect(k8s.List(ctx, &runs, client.InNamespace(ns))).To(Succeed())
	Expect(runs.Items).To(HaveLen(len(names)))
	var problems []string
	requests := srv.snapshot()
	for _, r := range runs.Items {
		problems = append(problems, checkRun(&r, requests, nil, watch)...)
		for _, step := range []string{"notify", "done"} {
			calls := requests["/"+ns+"/u/"+step+"/"+r.Spec.Target.Name]
			keys := map[string]bool{}
			for _, c := range calls {
				keys[c.key] = true
			}
			if len(calls) < 1 || len(calls) > maxCalls || len(keys) != 1 {
				problems = append(problems, fmt.Sprintf("%s: %s called %d times with %d Idempotency-Keys (want 1 to %d, one key)",
					r.Spec.Target.Name, step, len(calls), len(keys), maxCalls))
			}
		}
	}
	Expect(append(problems, watch.createdTwice()...)).To(BeEmpty())
	Expect(watch.jobs()).To(Equal(len(names)), "one Job an object")
}

// deployHandover creates namespace ns, the policy u (notify, an 8 s wait, a Job, done) and the
// objects, armed.
func deployHandover(ctx context.Context, ns string, srv *flakyServer, names []string) *observer {
	GinkgoHelper()
	post := func(name string) v1alpha1.Step {
		return v1alpha1.Step{Name: name, HTTP: &v1alpha1.HTTPStep{Method: "POST", URL: srv.srv.URL + "/" + ns + "/u/" + name + "/${object.metadata.name}"}}
	}
	job := framework.JobStep("dump", framework.Container("registry.example.com/dump:1",
		map[string]string{"teardown.dev/kwok-duration": "2s"}, "dump", "${object.metadata.name}"))
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	Expect(k8s.Create(ctx, framework.NamespacedPolicy(ns, "u", post("notify"), framework.WaitStep("settle", 8*time.Second), job, post("done")))).To(Succeed())
	watch := observe(ctx, ns)
	for _, name := range names {
		o := framework.ConfigMap(ns, name, map[string]string{"app": "u"})
		Expect(k8s.Create(ctx, o)).To(Succeed())
		Eventually(probeFinalizers(ctx, o), time.Minute).Should(ContainElement("teardownpolicy.teardown.dev/u"))
	}
	return watch
}
