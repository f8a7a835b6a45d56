package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// kubectlTeardown runs the built plugin against the cluster.
func kubectlTeardown(args ...string) (string, string, int) {
	cmd := exec.Command(pluginBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	return out.String(), errOut.String(), code
}

var _ = Describe("kubectl teardown on a real control plane", func() {
	ctx := context.Background()

	It("plans the deletion of a real Deployment and ConfigMap without touching them", func() {
		ns := newNamespace(ctx, "plan")
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"app": "web"}},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
				},
			},
		}
		Expect(k8s.Create(ctx, dep)).To(Succeed())
		p := framework.NamespacedPolicy(ns, "deregister", v1alpha1.Step{Name: "deregister", Timeout: framework.Dur(time.Minute),
			HTTP: &v1alpha1.HTTPStep{Method: "DELETE", URL: "https://cmdb.example.com/services/${object.metadata.namespace}/${object.metadata.name}"}})
		p.Spec.TargetRef = v1alpha1.TargetReference{APIVersion: "apps/v1", Kind: "Deployment"}
		p.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cm := framework.ConfigMap(ns, "settings", map[string]string{"app": "cleanup"})
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		cmPolicy := framework.NamespacedPolicy(ns, "cleanup", framework.WaitStep("drain", 30*time.Second))
		Expect(k8s.Create(ctx, cmPolicy)).To(Succeed())
		Eventually(probe.Finalizers(ctx, dep), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/deregister"))
		Eventually(probe.Finalizers(ctx, cm), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/cleanup"))

		out, errOut, code := kubectlTeardown("plan", "deployment/web", "-n", ns)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(ContainSubstring("TeardownPolicy/" + ns + "/deregister protects it"))
		Expect(out).To(ContainSubstring("DELETE https://cmdb.example.com/services/" + ns + "/web"))
		Expect(out).To(ContainSubstring("delete: allowed (dry run)"))

		out, errOut, code = kubectlTeardown("plan", "cm/settings", "-n", ns)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(ContainSubstring("cleanup protects it"))
		Expect(out).To(ContainSubstring("wait 30s"))

		By("leaving both objects as they were: not deleted, no run")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep)).To(Succeed())
		Expect(dep.DeletionTimestamp).To(BeNil())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		Expect(cm.DeletionTimestamp).To(BeNil())
		var runs v1alpha1.TeardownRunList
		Expect(k8s.List(ctx, &runs, client.InNamespace(ns))).To(Succeed())
		Expect(runs.Items).To(BeEmpty())
	})

	It("drains every finalizer after the operator is uninstalled, so protected objects can be deleted", func() {
		ns := newNamespace(ctx, "drain")
		p := framework.NamespacedPolicy(ns, "cleanup", framework.WaitStep("hold", time.Hour))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		var cms []*corev1.ConfigMap
		for i := range 3 {
			cm := framework.ConfigMap(ns, fmt.Sprintf("cm-%d", i), map[string]string{"app": "cleanup"})
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			cms = append(cms, cm)
		}
		for _, cm := range cms {
			Eventually(probe.Finalizers(ctx, cm), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/cleanup"))
		}
		By("starting one teardown, then uninstalling the operator mid-teardown")
		Expect(k8s.Delete(ctx, cms[0])).To(Succeed())
		Eventually(probe.RunPhase(ctx, cms[0]), 30*time.Second).Should(Equal(v1alpha1.RunRunning))
		stopOperator()
		DeferCleanup(startOperator)

		out, errOut, code := kubectlTeardown("drain", "--all", "--yes")
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(ContainSubstring("configmaps " + ns + "/cm-0 (being deleted: its deletion completes now)"))

		By("finding every object deletable, the policy and the run included")
		Eventually(probe.Gone(ctx, cms[0]), 30*time.Second).Should(BeTrue())
		for _, cm := range cms[1:] {
			Expect(probe.Finalizers(ctx, cm)()).To(BeEmpty())
			Expect(k8s.Delete(ctx, cm)).To(Succeed())
			Eventually(probe.Gone(ctx, cm), 30*time.Second).Should(BeTrue())
		}
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(probe.Gone(ctx, p), 30*time.Second).Should(BeTrue())
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		Expect(k8s.Delete(ctx, nsObj)).To(Succeed())
		Eventually(probe.Gone(ctx, nsObj), 2*time.Minute, time.Second).Should(BeTrue(), "the run's own finalizer was drained too")

		out, _, code = kubectlTeardown("drain", "--all", "--yes")
		Expect(code).To(Equal(0))
		Expect(out).NotTo(ContainSubstring(ns), "a second drain finds nothing of this namespace")
	})
})
