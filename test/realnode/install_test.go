package realnode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// operatorPods lists the operator's pods that are not being deleted.
func operatorPods(ctx context.Context) []corev1.Pod {
	pods := &corev1.PodList{}
	Expect(k8s.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{
		"app.kubernetes.io/name": "teardown-operator", "app.kubernetes.io/instance": release,
	})).To(Succeed())
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// readyPods returns the names of the operator's pods that are Ready on the real node.
func readyPods(ctx context.Context) func() []string {
	return func() []string {
		var names []string
		for _, p := range operatorPods(ctx) {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Spec.NodeName == "localhost" {
					names = append(names, p.Name)
				}
			}
		}
		return names
	}
}

// leader returns the pod name the operator's lease names as its holder ("" if none).
func leader(ctx context.Context) func() string {
	return func() string {
		lease := &coordinationv1.Lease{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "teardown-operator.teardown.dev"}, lease); err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		holder, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
		return holder
	}
}

func installAsDocumented(ctx SpecContext) {
	cmds := docCommands("### Installing with Helm")
	Expect(cmds).To(HaveLen(1))
	Expect(cmds[0]).To(HavePrefix("helm install teardown-operator charts/teardown-operator -n teardown-system"))
	By("running: " + cmds[0])
	out, err := shell(ctx, cmds[0])
	Expect(err).NotTo(HaveOccurred(), out)
	Expect(out).To(ContainSubstring("STATUS: deployed"))

	By("waiting for both replicas to be Ready: the kubelet runs their readiness probes")
	Eventually(readyPods(ctx), 120*time.Second, time.Second).Should(HaveLen(2))
	dep := &appsv1.Deployment{}
	// The Deployment controller counts the Ready pods a moment after the kubelet reports them.
	Eventually(func() (int32, error) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release}, dep)
		return dep.Status.ReadyReplicas, err
	}, 30*time.Second).Should(Equal(int32(2)))
	c := dep.Spec.Template.Spec.Containers[0]
	Expect(c.Image).To(HavePrefix("registry.example.com/teardown-operator:"))
	Expect(c.ReadinessProbe).NotTo(BeNil())
	Expect(c.LivenessProbe).NotTo(BeNil())
	for _, p := range operatorPods(ctx) {
		st := p.Status.ContainerStatuses
		Expect(st).To(HaveLen(1))
		Expect(st[0].Ready).To(BeTrue())
		Expect(st[0].State.Running).NotTo(BeNil(), "%s runs", p.Name)
		Expect(st[0].RestartCount).To(BeZero(), "%s never restarted (its liveness probe holds)", p.Name)
		Expect(p.Status.PodIP).To(HavePrefix("10.88.77."), "on the node's bridge")
	}

	By("one of them leads")
	Eventually(leader(ctx), 60*time.Second).Should(BeElementOf(readyPods(ctx)()))
	lead := leader(ctx)()
	logs, err := clientset.CoreV1().Pods(namespace).GetLogs(lead, &corev1.PodLogOptions{}).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred())
	Expect(string(logs)).To(ContainSubstring("Successfully acquired lease"))
	for _, p := range readyPods(ctx)() {
		if p != lead {
			logs, err := clientset.CoreV1().Pods(namespace).GetLogs(p, &corev1.PodLogOptions{}).DoRaw(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(logs)).NotTo(ContainSubstring("Successfully acquired lease"), "the standby waits")
		}
	}
}

func runsRestricted(ctx SpecContext) {
	pods := operatorPods(ctx)
	Expect(pods).To(HaveLen(2))
	for _, p := range pods {
		id := p.Status.ContainerStatuses[0].ContainerID
		pid := containerPID(id)
		Expect(pid).NotTo(BeZero(), "the process of container %s on the host", id)
		Expect(processExe(pid)).To(Equal("teardown-operator"))
		Expect(processIDs(pid, "Uid")).To(Equal([]string{"65532", "65532", "65532", "65532"}))
		Expect(processIDs(pid, "Gid")).To(Equal([]string{"65532", "65532", "65532", "65532"}))
		Expect(rootMountOptions(pid)).To(ContainElement("ro"), "its root filesystem is read-only")
		for _, sh := range []string{"bin/sh", "bin/bash", "busybox"} {
			_, err := os.Stat(filepath.Join("/proc", itoa(pid), "root", sh))
			Expect(os.IsNotExist(err)).To(BeTrue(), "no /%s in the image", sh)
		}
		out, err := shell(ctx, "kubectl exec -n "+namespace+" "+p.Name+" -- sh -c true")
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(`"sh": executable file not found`))
		out, err = shell(ctx, "kubectl exec -n "+namespace+" "+p.Name+" -- /kubectl-teardown version")
		Expect(err).NotTo(HaveOccurred(), out)
	}
}
