package realnode

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// crds are the CRDs the chart installs and keeps.
var crds = []string{"teardownpolicies.teardown.dev", "clusterteardownpolicies.teardown.dev", "teardownruns.teardown.dev", "teardownapprovals.teardown.dev"}

// hookWrites are the audit log's writes of the uninstall hook: by the operator's ServiceAccount,
// with kubectl-teardown, from a pod on the node's bridge.
func hookWrites() []auditEvent {
	return auditEvents(func(ev auditEvent) bool {
		return ev.User.Username == "system:serviceaccount:"+namespace+":"+release &&
			strings.HasPrefix(ev.UserAgent, "kubectl-teardown/") &&
			len(ev.SourceIPs) > 0 && strings.HasPrefix(ev.SourceIPs[0], "10.88.77.")
	})
}

func uninstallAsDocumented(ctx SpecContext) {
	cmds := docCommands("### Uninstall")
	Expect(cmds[0]).To(Equal("helm uninstall teardown-operator -n teardown-system"))
	held := []*corev1.ConfigMap{
		configMapNamed("rn-jobs", "exit3"), configMapNamed("rn-jobs", "timeout"), // being deleted, their runs Failed
	}
	bystander := configMapNamed("rn-basic", "bystander") // armed, not deleted
	for _, cm := range append(held, bystander) {
		Expect(probe.Finalizers(ctx, cm)()).To(ContainElement(HavePrefix("teardownpolicy.teardown.dev/")), cm.Name)
	}
	maps := &admissionregistrationv1.MutatingAdmissionPolicyList{}
	Expect(k8s.List(ctx, maps, client.MatchingLabels{"app.kubernetes.io/managed-by": "teardown-operator"})).To(Succeed())
	Expect(maps.Items).NotTo(BeEmpty(), "the operator arms objects at creation")

	By("running: " + cmds[0])
	out, err := shell(ctx, cmds[0])
	Expect(err).NotTo(HaveOccurred(), out)
	Expect(out).To(ContainSubstring(`release "teardown-operator" uninstalled`))

	By("the hook's drain ran in its container, as the operator's ServiceAccount")
	writes := hookWrites()
	Expect(writes).NotTo(BeEmpty(), "writes by the operator's ServiceAccount with kubectl-teardown from a pod of the bridge")
	var what []string
	for _, ev := range writes {
		what = append(what, ev.Verb+" "+ev.ObjectRef.Resource+"/"+ev.ObjectRef.Subresource+" "+ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name)
	}
	GinkgoWriter.Printf("the hook's writes (from %v):\n  %s\n", writes[0].SourceIPs, strings.Join(what, "\n  "))
	Expect(what).To(ContainElement("patch deployments/scale " + namespace + "/" + release))
	for _, cm := range append(held, bystander) {
		Expect(what).To(ContainElement("patch configmaps/ " + cm.Namespace + "/" + cm.Name))
	}

	By("every finalizer is released: objects being deleted go, the others stay unprotected")
	for _, cm := range held {
		Eventually(probe.Gone(ctx, cm), 30*time.Second).Should(BeTrue(), cm.Name)
	}
	Expect(probe.Finalizers(ctx, bystander)()).To(BeEmpty())
	Expect(k8s.List(ctx, maps, client.MatchingLabels{"app.kubernetes.io/managed-by": "teardown-operator"})).To(Succeed())
	Expect(maps.Items).To(BeEmpty(), "no admission policy is left to arm new objects")
	Eventually(func() []corev1.Pod { return operatorPods(ctx) }, 60*time.Second).Should(BeEmpty())
	out, err = shell(ctx, "helm list -n teardown-system -q")
	Expect(err).NotTo(HaveOccurred(), out)
	Expect(strings.TrimSpace(out)).To(BeEmpty())

	By("the CRDs stay (crds.keep)")
	for _, name := range crds {
		Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{})).To(Succeed(), name)
	}

	for _, cmd := range cmds[1:] {
		By("running: " + cmd)
		out, err := shell(ctx, cmd)
		Expect(err).NotTo(HaveOccurred(), out)
	}
	By("the namespace and the CRDs go")
	Eventually(probe.Gone(ctx, &corev1.Namespace{ObjectMeta: metaName("", namespace)}), 60*time.Second).Should(BeTrue())
	for _, name := range crds {
		Eventually(probe.Gone(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metaName("", name)}), 60*time.Second).Should(BeTrue(), name)
	}
}

// configMapNamed stands for the ConfigMap ns/name, for probes.
func configMapNamed(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metaName(ns, name)}
}
