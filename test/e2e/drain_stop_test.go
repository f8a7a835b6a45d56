package e2e

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/teardown-dev/teardown-operator/test/framework"
)

// operatorLabels are labels like the chart's on the operator's pods; the spec gives a Job's pod the same
// labels, to prove drain waits only for the Deployment's pods.
func operatorLabels(ns string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "teardown-operator", "app.kubernetes.io/instance": ns}
}

// operatorPodSpec runs on kwok's node, which keeps a pod not of a Job Running until it is deleted.
func operatorPodSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "teardown-operator:dev"}}}
}

// shutdownFinalizer keeps a stand-in's deleted pod terminating, as a real operator's pod is while
// it shuts down, until the spec removes it.
const shutdownFinalizer = "e2e.teardown.dev/shutting-down"

// operatorStandIn is a Deployment as the chart installs the operator: on kwok its pods are
// simulated, so it stands for the operator that the suite runs as a process. Its pods carry
// finalizers, when given, which the ReplicaSet controller copies from the template.
func operatorStandIn(ns string, replicas int32, finalizers ...string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "teardown-operator"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: operatorLabels(ns)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: operatorLabels(ns), Finalizers: finalizers},
				Spec:       operatorPodSpec(),
			},
		},
	}
}

// podsLabelled lists the names of the pods with the operator's labels, by their controller's kind
// ("" for a bare pod).
func podsLabelled(ctx context.Context, ns string) func() map[string]string {
	return func() map[string]string {
		var pods corev1.PodList
		Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(operatorLabels(ns)))).To(Succeed())
		out := map[string]string{}
		for _, p := range pods.Items {
			kind := ""
			if owner := metav1.GetControllerOf(&p); owner != nil {
				kind = owner.Kind
			}
			out[p.Name] = kind
		}
		return out
	}
}

// terminating counts the pods with the operator's labels that are being deleted.
func terminating(ctx context.Context, ns string) func() int {
	return func() int {
		var pods corev1.PodList
		Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(operatorLabels(ns)))).To(Succeed())
		n := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				n++
			}
		}
		return n
	}
}

// finishShutdown removes the shutdown finalizer of the pods with the operator's labels.
func finishShutdown(ctx context.Context, ns string) {
	var pods corev1.PodList
	Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(operatorLabels(ns)))).To(Succeed())
	for i := range pods.Items {
		p := &pods.Items[i]
		if controllerutil.RemoveFinalizer(p, shutdownFinalizer) {
			Expect(k8s.Update(ctx, p)).To(Succeed())
		}
	}
}

type pluginResult struct {
	out, errOut string
	code        int
}

// kubectlTeardownAsync runs the plugin in the background; its result comes on the channel.
func kubectlTeardownAsync(args ...string) <-chan pluginResult {
	done := make(chan pluginResult, 1)
	go func() {
		defer GinkgoRecover()
		out, errOut, code := kubectlTeardown(args...)
		done <- pluginResult{out, errOut, code}
	}()
	return done
}

// hookJob is a stand-in for the chart's uninstall hook: a Job whose pod has the operator's labels,
// running for an hour.
func hookJob(ns string) *batchv1.Job {
	spec := operatorPodSpec()
	spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "teardown-operator-drain"},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: operatorLabels(ns), Annotations: kwokPod("1h", false)},
			Spec:       spec,
		}},
	}
}

func countKind(pods map[string]string, kind string) int {
	n := 0
	for _, k := range pods {
		if k == kind {
			n++
		}
	}
	return n
}

func replicasOf(ctx context.Context, dep *appsv1.Deployment) int32 {
	got := &appsv1.Deployment{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(dep), got)).To(Succeed())
	return *got.Spec.Replicas
}

// protectedConfigMap creates a policy and a ConfigMap it protects, and waits for its finalizer.
func protectedConfigMap(ctx context.Context, ns string) *corev1.ConfigMap {
	Expect(k8s.Create(ctx, framework.NamespacedPolicy(ns, "cleanup", framework.WaitStep("hold", time.Second)))).To(Succeed())
	cm := framework.ConfigMap(ns, "settings", map[string]string{"app": "cleanup"})
	Expect(k8s.Create(ctx, cm)).To(Succeed())
	Eventually(probe.Finalizers(ctx, cm), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/cleanup"))
	return cm
}

var _ = Describe("kubectl teardown drain --stop-operator, as the chart's uninstall hook runs it", func() {
	ctx := context.Background()

	It("scales the operator's Deployment to 0, waits until its pods are gone, then drains", func() {
		ns := newNamespace(ctx, "stop")
		DeferCleanup(func() { _ = k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
		cm := protectedConfigMap(ctx, ns)
		dep := operatorStandIn(ns, 2, shutdownFinalizer)
		Expect(k8s.Create(ctx, dep)).To(Succeed())
		By("running the uninstall hook's Job beside it, its pod with the operator's labels")
		Expect(k8s.Create(ctx, hookJob(ns))).To(Succeed())
		pods := podsLabelled(ctx, ns)
		Eventually(func() []int { p := pods(); return []int{countKind(p, "ReplicaSet"), countKind(p, "Job")} }, time.Minute, time.Second).
			Should(Equal([]int{2, 1}))
		stopOperator() // the suite's operator process, which the Deployment stands for
		DeferCleanup(startOperator)
		ref := ns + "/teardown-operator"

		By("a dry run saying what it would stop, and stopping nothing")
		out, errOut, code := kubectlTeardown("drain", "--policy", "TeardownPolicy/cleanup", "-n", ns, "--dry-run", "--stop-operator", ref)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(HavePrefix("would stop deployment " + ref + " (2 replicas)\n"))
		Expect(replicasOf(ctx, dep)).To(Equal(int32(2)))
		Expect(countKind(pods(), "ReplicaSet")).To(Equal(2))

		By("a Deployment that does not exist failing the drain before it releases anything")
		_, errOut, code = kubectlTeardown("drain", "--all", "--yes", "--stop-operator", ns+"/nope")
		Expect(code).To(Equal(2))
		Expect(errOut).To(Equal("error: --stop-operator: deployment " + ns + "/nope not found\n"))
		Expect(probe.Finalizers(ctx, cm)()).To(ContainElement("teardownpolicy.teardown.dev/cleanup"))

		By("draining: it waits while the operator's pods shut down, releasing nothing meanwhile")
		done := kubectlTeardownAsync("drain", "--all", "--yes", "--stop-operator", ref)
		Eventually(terminating(ctx, ns), 30*time.Second, 200*time.Millisecond).Should(Equal(2))
		Consistently(done, 3*time.Second).ShouldNot(Receive())
		Expect(probe.Finalizers(ctx, cm)()).To(ContainElement("teardownpolicy.teardown.dev/cleanup"))
		finishShutdown(ctx, ns)
		var res pluginResult
		Eventually(done, 30*time.Second).Should(Receive(&res))
		out, errOut, code = res.out, res.errOut, res.code
		Expect(code).To(Equal(0), errOut)
		left := pods()
		Expect(countKind(left, "ReplicaSet")).To(BeZero(), "drain returned with the operator's pods still there")
		Expect(left).To(HaveLen(1), "the hook Job's pod stays, and drain did not wait for it")
		Expect(replicasOf(ctx, dep)).To(BeZero())
		stopped := "stopped deployment " + ref + " (was 2 replicas)\n"
		released := "released teardownpolicy.teardown.dev/cleanup from configmaps " + ns + "/settings\n"
		Expect(out).To(HavePrefix(stopped), "it stops the operator before it releases anything")
		Expect(out).To(ContainSubstring(released))
		Expect(probe.Finalizers(ctx, cm)()).To(BeEmpty())

		By("running it again: the Deployment is at 0, nothing to stop")
		out, errOut, code = kubectlTeardown("drain", "--all", "--yes", "--stop-operator", ref)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(HavePrefix("nothing to stop: deployment " + ref + " is already at 0 replicas\n"))
		Expect(out).NotTo(ContainSubstring(ns + "/settings"))
	})

	It("fails after --timeout while a pod with the operator's labels remains, naming it, and drains nothing", func() {
		ns := newNamespace(ctx, "stoptimeout")
		DeferCleanup(func() { _ = k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
		cm := protectedConfigMap(ctx, ns)
		dep := operatorStandIn(ns, 1)
		Expect(k8s.Create(ctx, dep)).To(Succeed())
		straggler := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "straggler", Labels: operatorLabels(ns)}, Spec: operatorPodSpec()}
		Expect(k8s.Create(ctx, straggler)).To(Succeed())
		Eventually(func() int { return countKind(podsLabelled(ctx, ns)(), "ReplicaSet") }, time.Minute, time.Second).Should(Equal(1))
		stopOperator()
		DeferCleanup(startOperator)

		start := time.Now()
		out, errOut, code := kubectlTeardown("drain", "--policy", "TeardownPolicy/cleanup", "-n", ns, "--stop-operator", ns+"/teardown-operator", "--timeout", "5s")
		Expect(time.Since(start)).To(BeNumerically(">=", 5*time.Second))
		Expect(code).To(Equal(1), "the Deployment was scaled: not the nothing-done exit 2")
		Expect(out).To(BeEmpty())
		Expect(strings.Count(errOut, "\n")).To(Equal(1), errOut)
		Expect(errOut).To(ContainSubstring("--stop-operator: 1 pod of deployment " + ns + "/teardown-operator still remains after 5s (straggler)"))
		Expect(errOut).To(ContainSubstring("nothing was drained"))
		Expect(replicasOf(ctx, dep)).To(BeZero())
		Expect(podsLabelled(ctx, ns)()).To(Equal(map[string]string{"straggler": ""}))
		Expect(probe.Finalizers(ctx, cm)()).To(ContainElement("teardownpolicy.teardown.dev/cleanup"))
	})
})
