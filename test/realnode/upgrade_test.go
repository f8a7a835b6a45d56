package realnode

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// previousImage is the name the previous release's operator image is imported under.
const previousImage = "registry.example.com/teardown-operator:previous"

// keepFinalizer is another controller's, on the upgrade spec's objects: an object the operator
// released stays (deleting), so that a release can be checked against its run.
const keepFinalizer = "example.com/keep"

// upgradePolicy's teardowns are in flight across a rollout: a Job, a Job whose container sleeps
// (running when the rollout starts), a gate the spec opens once the rollout is done (a ConfigMap
// labelled gate=open), a wait.
const upgradePolicy = `apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata: {name: rollout, namespace: %[1]s}
spec:
  targetRef: {apiVersion: v1, kind: ConfigMap}
  selector: {matchLabels: {app: rollout}}
  steps:
  - name: first
    job: {template: {spec: {backoffLimit: 0, template: {spec: {containers: [{name: main, image: %[2]s, imagePullPolicy: Never, command: [sh, -c, echo first]}]}}}}}
  - name: slow
    job: {template: {spec: {backoffLimit: 0, template: {spec: {containers: [{name: main, image: %[2]s, imagePullPolicy: Never, command: [sh, -c, 'sleep 8; echo slow']}]}}}}}
  - name: gate
    wait:
      until: size(gate) > 0
      lookups: [{name: gate, apiVersion: v1, kind: ConfigMap, selector: {matchLabels: {gate: open}}}]
  - name: last
    wait: {duration: 1s}
`

// previousChart builds the previous release's operator image from git (a worktree of
// framework.PreviousRevision), imports it into the node as previousImage, and returns the
// revision and the directory of its chart.
func previousChart(ctx context.Context) (rev, chart string) {
	GinkgoHelper()
	rev, err := framework.PreviousRevision(root)
	Expect(err).NotTo(HaveOccurred())
	src := filepath.Join(GinkgoT().TempDir(), "src")
	remove, err := framework.Worktree(root, rev, src)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(remove)
	out := GinkgoT().TempDir()
	build := exec.CommandContext(ctx, "go", "run", "./hack/image", "-tag", previousImage, "-platforms", "linux/amd64", "-out", out)
	build.Dir = src
	log, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(log))
	Expect(framework.ImportNodeImages(root, []string{filepath.Join(out, "teardown-operator.tar")})).To(Succeed())
	return rev, filepath.Join(src, "charts", "teardown-operator")
}

func upgradesInFlight(ctx SpecContext) {
	By("building the previous release's image from git")
	rev, chart := previousChart(ctx)
	ns := newNamespace(ctx, "rn-upgrade")
	apply(ctx, fmt.Sprintf(upgradePolicy, ns, busybox))
	repo, _, _ := strings.Cut(previousImage, ":")

	By("down to the previous release (" + rev + ") with teardowns in flight")
	rollOut(ctx, ns, "down", fmt.Sprintf("helm upgrade teardown-operator %s -n teardown-system --set image.repository=%s --set image.tag=previous --wait --timeout 3m", chart, repo), previousImage)

	By("up to this release with teardowns in flight, with docs/operating.md's upgrade command")
	cmds := docBlock("### Installing with Helm", 1)
	Expect(cmds).To(HaveLen(1))
	Expect(cmds[0]).To(HavePrefix("helm upgrade teardown-operator charts/teardown-operator -n teardown-system"))
	rollOut(ctx, ns, "up", cmds[0]+" --wait --timeout 3m", repo+":"+appVersion())
}

// rollOut starts the teardown of 3 objects, runs the helm upgrade cmd once every one is in its
// slow step, and checks that the operator, running image afterwards, finishes them: each run
// Succeeded, each step once (one Job each, created once), no object released before its run
// recorded success.
func rollOut(ctx context.Context, ns, prefix, cmd, image string) {
	GinkgoHelper()
	var objects []*corev1.ConfigMap
	for i := range 3 {
		cm := framework.ConfigMap(ns, fmt.Sprintf("%s-%d", prefix, i), map[string]string{"app": "rollout"})
		cm.Finalizers = []string{keepFinalizer}
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Eventually(probe.Finalizers(ctx, cm), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/rollout"))
		objects = append(objects, cm)
	}
	early := watchReleases(ctx, ns, objects)
	for _, cm := range objects {
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
	}
	for _, cm := range objects {
		Eventually(func() bool {
			jobs := jobsOfStep(ctx, ns, cm, "slow")
			return len(jobs) == 1 && jobs[0].Status.Ready != nil && *jobs[0].Status.Ready == 1
		}, 90*time.Second, 200*time.Millisecond).Should(BeTrue(), "%s's slow step never ran", cm.Name)
	}
	before := operatorPods(ctx)

	By("running: " + cmd)
	start := time.Now()
	out, err := shell(ctx, cmd)
	Expect(err).NotTo(HaveOccurred(), out)
	GinkgoWriter.Printf("%s: rolled out in %s\n", prefix, time.Since(start).Round(time.Second))
	after := operatorPods(ctx)
	Expect(after).To(HaveLen(2))
	for _, p := range after {
		Expect(p.Spec.Containers[0].Image).To(Equal(image))
		Expect(slices.ContainsFunc(before, func(b corev1.Pod) bool { return b.Name == p.Name })).To(BeFalse(), "%s was replaced", p.Name)
	}

	By("opening the gate: the operator now running finishes every teardown, each step once, no object released early")
	gate := framework.ConfigMap(ns, "gate", map[string]string{"gate": "open"})
	Expect(k8s.Create(ctx, gate)).To(Succeed())
	for _, cm := range objects {
		Eventually(probe.Finalizers(ctx, cm), 90*time.Second, 200*time.Millisecond).Should(Equal([]string{keepFinalizer}), "%s was not released", cm.Name)
		run := probe.RunFor(ctx, cm)()
		Expect(run).NotTo(BeNil())
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded), cm.Name)
		for _, step := range []string{"first", "slow"} {
			Expect(stepOf(run, step).Attempts).To(Equal(int32(1)), "%s: step %s", cm.Name, step)
			Expect(jobsOfStep(ctx, ns, cm, step)).To(HaveLen(1), "%s: the Jobs of step %s", cm.Name, step)
		}
		Expect(stepOf(run, "last").Phase).To(Equal(v1alpha1.StepSucceeded), cm.Name)
	}
	jobs := map[string]bool{}
	for _, cm := range objects {
		for _, step := range []string{"first", "slow"} {
			for _, j := range jobsOfStep(ctx, ns, cm, step) {
				jobs[j.Name] = true
			}
		}
	}
	var created []string
	for _, ev := range jobCreations(ns) {
		if jobs[ev.ObjectRef.Name] {
			created = append(created, ev.ObjectRef.Name)
		}
	}
	Expect(created).To(HaveLen(2*len(objects)), "one Job created per step and object, by whichever replica")
	Expect(early()).To(BeEmpty())
	By("both releases wrote every run: the one rolled out finished what the other started")
	for _, cm := range objects {
		run := probe.RunFor(ctx, cm)()
		writers := map[string]bool{}
		for _, ev := range auditEvents(func(ev auditEvent) bool {
			return ev.ObjectRef.Resource == "teardownruns" && ev.ObjectRef.Namespace == run.Namespace && ev.ObjectRef.Name == run.Name &&
				ev.Verb != "create" && len(ev.SourceIPs) > 0
		}) {
			writers[podRelease(ev.SourceIPs[0], before, after)] = true
		}
		Expect(writers).To(HaveKey("rolled out"), "%s: no write of run %s by the pods rolled out", cm.Name, run.Name)
		Expect(writers).To(HaveKey("replaced"), "%s: no write of run %s by the pods replaced", cm.Name, run.Name)
	}
	Expect(k8s.Delete(ctx, gate)).To(Succeed())
	for _, cm := range objects {
		Expect(k8s.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
		Eventually(probe.Gone(ctx, cm), 30*time.Second).Should(BeTrue())
	}
}

// podRelease says whose the address ip is: "replaced" (a pod before the rollout), "rolled out"
// (one after), or "other".
func podRelease(ip string, before, after []corev1.Pod) string {
	has := func(pods []corev1.Pod) bool {
		return slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Status.PodIP == ip })
	}
	switch {
	case has(after):
		return "rolled out"
	case has(before):
		return "replaced"
	}
	return "other"
}

// watchReleases looks at the objects every 100 ms until the spec ends, and returns what tells
// the objects it found released (the policy's finalizer gone) while their run, read after, had not
// recorded success.
func watchReleases(ctx context.Context, ns string, objects []*corev1.ConfigMap) func() []string {
	var mu sync.Mutex
	var early []string
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for _, cm := range objects {
				live := &corev1.ConfigMap{}
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(cm), live); err != nil || live.DeletionTimestamp == nil ||
					slices.Contains(live.Finalizers, "teardownpolicy.teardown.dev/rollout") {
					continue
				}
				if run := probe.RunFor(ctx, live)(); run == nil || run.Status.Phase != v1alpha1.RunSucceeded {
					mu.Lock()
					early = append(early, fmt.Sprintf("%s released while its run was %v", cm.Name, phaseOf(run)))
					mu.Unlock()
				}
			}
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { close(done) }) }
	DeferCleanup(stop)
	return func() []string {
		stop()
		mu.Lock()
		defer mu.Unlock()
		return slices.Compact(early)
	}
}

func phaseOf(run *v1alpha1.TeardownRun) string {
	if run == nil {
		return "not found"
	}
	return string(run.Status.Phase)
}
