package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/cli"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// cliResult is what a run of the plugin printed, and its exit code.
type cliResult struct {
	out, errOut string
	code        int
}

// kubectlTeardownAsync runs the plugin in the background, for commands that follow a teardown.
func kubectlTeardownAsync(args ...string) <-chan cliResult {
	done := make(chan cliResult, 1)
	go func() {
		defer GinkgoRecover()
		out, errOut, code := kubectlTeardown(args...)
		done <- cliResult{out, errOut, code}
	}()
	return done
}

// lastFrame is the last frame status --watch printed (frames are separated by "---").
func lastFrame(out string) string {
	frames := strings.Split(out, "---\n")
	return frames[len(frames)-1]
}

// childrenPolicy waits until no ConfigMap labelled parent=<object name> is left, for timeout.
func childrenPolicy(ns, name string, timeout time.Duration) *v1alpha1.TeardownPolicy {
	p := namespacedPolicy(ns, name, v1alpha1.Step{Name: "children", Timeout: dur(timeout), Wait: &v1alpha1.WaitStep{
		Until: "size(children) == 0", Interval: dur(200 * time.Millisecond),
		Lookups: []v1alpha1.Lookup{{Name: "children", APIVersion: "v1", Kind: "ConfigMap",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"parent": "${object.metadata.name}"}}}}}})
	p.Spec.FailurePolicy = v1alpha1.FailurePolicyRetain
	return p
}

var _ = Describe("Following teardowns with kubectl teardown", func() {
	ctx := context.Background()

	BeforeEach(func() { cliKubeconfig = writeKubeconfig(cfg) })

	It("follows an object with status --watch from before its deletion to its end, and shows its runs once it is gone", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "pause", waitStep("pause", 2*time.Second))
		cm := protect(ctx, p, "orders")

		watching := kubectlTeardownAsync("status", "configmap/orders", "-n", ns, "-w", "--interval", "200ms")
		Consistently(watching, 2*time.Second).ShouldNot(Receive(), "nothing has happened yet: --watch waits for the deletion")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		var res cliResult
		Eventually(watching, 20*time.Second).Should(Receive(&res))
		Expect(res.code).To(Equal(cli.ExitOK), res.errOut)
		Expect(res.errOut).To(BeEmpty())
		Expect(res.out).To(ContainSubstring("ConfigMap " + ns + "/orders  not being deleted"))
		Expect(res.out).To(ContainSubstring("no teardown run yet: runs start when it is deleted"))
		Expect(res.out).To(MatchRegexp(`TeardownRun \S+  Running`))
		final := lastFrame(res.out)
		Expect(final).To(ContainSubstring("ConfigMap " + ns + "/orders  gone  (uid " + string(cm.UID) + ")"))
		Expect(final).To(MatchRegexp(`TeardownRun ` + ns + `/\S+  Succeeded`))
		Expect(gone(ctx, cm)()).To(BeTrue())

		By("the object is gone: its runs are still shown while they are kept")
		out, errOut, code := kubectlTeardown("status", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("ConfigMap " + ns + "/orders  gone"))
		Expect(out).To(MatchRegexp(`TeardownRun ` + ns + `/\S+  Succeeded`))

		By("an object created again under that name is another object")
		again := protect(ctx, p, "orders")
		out, errOut, code = kubectlTeardown("status", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("ConfigMap " + ns + "/orders  not being deleted  (uid " + string(again.UID) + ")"))
		Expect(out).To(ContainSubstring("1 other object(s) of that name have kept runs, not shown: uid " + string(cm.UID)))
		Expect(out).NotTo(ContainSubstring("TeardownRun"))
		Expect(k8s.Delete(ctx, again)).To(Succeed())
		Eventually(gone(ctx, again), 15*time.Second).Should(BeTrue())
		out, _, code = kubectlTeardown("status", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK))
		Expect(out).To(ContainSubstring("(uid " + string(again.UID) + ")"))
		Expect(out).To(ContainSubstring("1 other object(s) of that name have kept runs"))

		_, errOut, code = kubectlTeardown("status", "configmap/never-was", "-n", ns)
		Expect(code).To(Equal(cli.ExitUsage))
		expectOneLineError(errOut, "ConfigMap "+ns+"/never-was not found, and no TeardownRun")
	})

	It("says what a wait step's lookups found while it waits and when it times out; --watch exits 1 on a Failed run", func() {
		ns := newNamespace(ctx)
		cm := protect(ctx, childrenPolicy(ns, "children", 4*time.Second), "orders")
		for _, child := range []string{"orders-b", "orders-a"} {
			Expect(k8s.Create(ctx, configMap(ns, child, map[string]string{"parent": "orders"}))).To(Succeed())
		}
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(func() string {
			if run := runFor(ctx, cm)(); run != nil && run.Status.Step("children") != nil {
				return run.Status.Step("children").Message
			}
			return ""
		}, 10*time.Second).
			Should(Equal("waiting for size(children) == 0: children: 2 (orders-a, orders-b)"))
		out, errOut, code := kubectlTeardown("status", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("waiting for size(children) == 0: children: 2 (orders-a, orders-b)"))

		res := <-kubectlTeardownAsync("status", "configmap/orders", "-n", ns, "-w", "--interval", "200ms")
		Expect(res.code).To(Equal(cli.ExitFindings), "a Failed run that keeps its object ends the watch with exit 1")
		expectOneLineError(res.errOut, "ended Failed")
		Expect(res.errOut).To(ContainSubstring("kubectl teardown retry"))
		Expect(lastFrame(res.out)).To(ContainSubstring("being deleted since"))
		ss := stepOf(ctx, cm, "children")
		Expect(ss.Phase).To(Equal(v1alpha1.StepFailed))
		Expect(ss.Message).To(MatchRegexp(`^timed out after 4s \(1 attempts\); last: waiting for size\(children\) == 0: children: 2 \(orders-a, orders-b\)$`))
		breakGlass(ctx, cm)
	})

	It("lists a policy's teardowns and runs, finished ones included, newest first", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "instant", waitStep("pause", 0))
		p.Spec.RunHistory = v1alpha1.RunHistoryAll
		first := protect(ctx, p, "first")
		Expect(k8s.Delete(ctx, first)).To(Succeed())
		Eventually(gone(ctx, first), 10*time.Second).Should(BeTrue())
		second := protect(ctx, p, "second")
		Expect(k8s.Delete(ctx, second)).To(Succeed())
		Eventually(gone(ctx, second), 10*time.Second).Should(BeTrue())
		firstRun, secondRun := runFor(ctx, first)(), runFor(ctx, second)()

		Eventually(func() int64 {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			return p.Status.Teardowns.Succeeded
		}, 15*time.Second).Should(Equal(int64(2)), "the policy's history takes in both teardowns")
		out, errOut, code := kubectlTeardown("status", "--policy", "TeardownPolicy/instant", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("TeardownPolicy/" + ns + "/instant: teardowns ended 2 times: 2 succeeded, 0 failed, 0 abandoned, 0 cancelled."))
		Expect(out).To(MatchRegexp(`(?s)Recent teardowns, newest first:\s+ENDED\s+TARGET\s+OUTCOME\s+RUN\s+MESSAGE\s+\S+Z\s+ConfigMap ` + ns + `/second\s+Succeeded\s+` +
			regexp.QuoteMeta(ns+"/"+secondRun.Name) + `\s+all steps done\s+\S+Z\s+ConfigMap ` + ns + `/first\s+Succeeded\s+` + regexp.QuoteMeta(ns+"/"+firstRun.Name)))
		Expect(out).To(MatchRegexp(`(?m)^NAMESPACE\s+NAME\s+TARGET\s+PHASE\s+STARTED\s+DURATION\s+MESSAGE`))
		Expect(out).To(MatchRegexp(`(?s)` + regexp.QuoteMeta(secondRun.Name) + `\s+ConfigMap ` + ns + `/second\s+Succeeded\s+\S+Z\s+\d+s.*` +
			regexp.QuoteMeta(firstRun.Name) + `\s+ConfigMap ` + ns + `/first\s+Succeeded`))

		By("the labels docs/operating.md documents select the same runs")
		var runs v1alpha1.TeardownRunList
		Expect(k8s.List(ctx, &runs, client.MatchingLabels{v1alpha1.LabelPolicy: "instant", v1alpha1.LabelPolicyNamespace: ns})).To(Succeed())
		Expect(runs.Items).To(HaveLen(2))
		Expect(k8s.List(ctx, &runs, client.MatchingLabels{v1alpha1.LabelTargetKind: "ConfigMap", v1alpha1.LabelTargetNamespace: ns,
			v1alpha1.LabelTargetName: "first"})).To(Succeed())
		Expect(runs.Items).To(HaveLen(1))

		out, errOut, code = kubectlTeardown("status", "--policy", "instant", "-n", ns, "-o", "json")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		var list v1alpha1.TeardownRunList
		Expect(json.Unmarshal([]byte(out), &list)).To(Succeed(), out)
		Expect(list.Items).To(HaveLen(2))
		_, errOut, code = kubectlTeardown("status", "--policy", "nosuch", "-n", ns)
		Expect(code).To(Equal(cli.ExitUsage))
		expectOneLineError(errOut, "no such policy")
	})

	It("prints no runs as an empty List, items [] and not null", func() {
		out, errOut, code := kubectlTeardown("status", "-n", newNamespace(ctx), "-o", "json")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring(`"items": []`))
		Expect(out).NotTo(ContainSubstring(`null`))
	})

	It("reports a retried run that fails again, with exit 1", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "backend down", http.StatusInternalServerError)
		})
		p := namespacedPolicy(ns, "hook", httpStep("hook", v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, "/hook")}))
		p.Spec.FailurePolicy = v1alpha1.FailurePolicyRetain
		p.Spec.Steps[0].Retry = &v1alpha1.RetryPolicy{Limit: 0}
		cm := protect(ctx, p, "orders")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(runPhase(ctx, cm), 15*time.Second).Should(Equal(v1alpha1.RunFailed))

		out, errOut, code := kubectlTeardown("retry", "configmap/orders", "-n", ns, "--reason", "alice: not fixed at all")
		Expect(code).To(Equal(cli.ExitFindings), out)
		Expect(out).To(ContainSubstring("retry 1 accepted: the run resumed from step hook"))
		expectOneLineError(errOut, "failed again: step hook failed")
		Expect(errOut).To(ContainSubstring("500"))
		Expect(runFor(ctx, cm)().Status.Retries).To(Equal(int32(1)))
		breakGlass(ctx, cm)
	})

	It("completes each target kind and object once, group-qualified kinds included", func() {
		Expect(framework.InstallCRDs(ctx, k8s, upstreamCRDs)).To(Succeed())
		ns := newNamespace(ctx)
		for _, name := range []string{"one", "two"} {
			p := namespacedPolicy(ns, name, waitStep("pause", 0))
			p.Spec.Selector = nil
			Expect(k8s.Create(ctx, p)).To(Succeed())
		}
		topics := namespacedPolicy(ns, "topics", waitStep("pause", 0))
		topics.Spec.TargetRef = v1alpha1.TargetReference{APIVersion: "kafka.strimzi.io/v1", Kind: "KafkaTopic"}
		Expect(k8s.Create(ctx, topics)).To(Succeed())
		Expect(k8s.Create(ctx, configMap(ns, "orders", nil))).To(Succeed())
		topic := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"partitions": int64(1)}}}
		topic.SetGroupVersionKind(strimziTopicGVK)
		topic.SetNamespace(ns)
		topic.SetName("orders-topic")
		Expect(k8s.Create(ctx, topic)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(ctx, topic) })

		completions := func(args ...string) []string {
			out, errOut, code := kubectlTeardown(append([]string{"__complete"}, args...)...)
			Expect(code).To(Equal(cli.ExitOK), errOut)
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if !strings.HasPrefix(l, ":") && !strings.HasPrefix(l, "Completion ended") {
					lines = append(lines, l)
				}
			}
			return lines
		}
		Expect(completions("plan", "-n", ns, "")).To(Equal([]string{"configmap/", "kafkatopic.kafka.strimzi.io/"}))
		Expect(completions("plan", "-n", ns, "configmap/or")).To(Equal([]string{"configmap/orders"}))
		Expect(completions("status", "-n", ns, "cm/")).To(Equal([]string{"cm/orders"}))
		Expect(completions("plan", "-n", ns, "kafkatopics.kafka.strimzi.io/")).To(Equal([]string{"kafkatopics.kafka.strimzi.io/orders-topic"}))
		Expect(completions("plan", "-n", ns, "kafkatopic.kafka.strimzi.io/ord")).To(Equal([]string{"kafkatopic.kafka.strimzi.io/orders-topic"}))
		Expect(completions("status", "-n", ns, "--policy", "")).To(ContainElements("TeardownPolicy/one", "TeardownPolicy/topics"))
	})
})

var _ = Describe("kubectl teardown status while the operator is down", Serial, func() {
	ctx := context.Background()

	BeforeEach(func() { cliKubeconfig = writeKubeconfig(cfg) })

	It("says that no replica holds the lease, since when, and that an object being deleted has no run yet", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "hold", waitStep("pause", 0))
		cm := protect(ctx, p, "d")

		stopOperator()
		DeferCleanup(func() { stopOperator = startOperator() })
		lease := setLease(ctx, "teardown-operator-7d9c-x2x4q_1", time.Now().Add(-time.Hour), 15*time.Second)
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())

		out, errOut, code := kubectlTeardown("status", "configmap/d", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).NotTo(ContainSubstring("runs start when"))
		Expect(out).To(ContainSubstring("ConfigMap " + ns + "/d  being deleted since " + cm.DeletionTimestamp.UTC().Format(time.RFC3339)))
		Expect(out).To(ContainSubstring("held by  " + finalizerOf(p)))
		Expect(out).To(ContainSubstring("no teardown run has started: the operator is not running"))
		since := lease.Spec.RenewTime.UTC().Format(time.RFC3339)
		Expect(out).To(ContainSubstring("operator: NOT RUNNING: no replica has held lease " + runNamespace + "/" + v1alpha1.LeaderElectionLease + " since " + since))

		out, errOut, code = kubectlTeardown("status", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("operator: NOT RUNNING"))

		out, errOut, code = kubectlTeardown("status", "configmap/d", "-n", ns, "-o", "json")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		var list v1alpha1.TeardownRunList
		Expect(json.Unmarshal([]byte(out), &list)).To(Succeed(), "stdout is one List: %s", out)
		Expect(list.Items).To(BeEmpty())
		Expect(errOut).To(HavePrefix("note: operator: NOT RUNNING"))

		By("with no lease at all, the object being deleted waits for an operator that has not acted yet")
		Expect(k8s.Delete(ctx, lease)).To(Succeed())
		out, _, _ = kubectlTeardown("status", "configmap/d", "-n", ns)
		Expect(out).To(ContainSubstring("no teardown run has started: the operator has not acted on it yet"))
		Expect(out).To(ContainSubstring("operator: unknown (no lease"))
	})
})
