package e2e

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// runOperatorAsServiceAccount restarts the operator, for the rest of the container, as the
// service account an install gives it (kubeconfig impersonation), bound to the shipped
// ClusterRole, with no more rights than an install gives it.
func runOperatorAsServiceAccount(ctx context.Context) {
	GinkgoHelper()
	Expect(framework.BindOperatorRole(ctx, k8s, root, framework.OperatorNamespace, framework.OperatorName)).To(Succeed())
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	for _, a := range kc.AuthInfos {
		a.Impersonate = framework.OperatorUser()
		a.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + framework.OperatorNamespace, "system:authenticated"}
	}
	asOperator := filepath.Join(GinkgoT().TempDir(), "operator.kubeconfig")
	Expect(clientcmd.WriteToFile(*kc, asOperator)).To(Succeed())
	stopOperator()
	startOperatorWith(asOperator)
	DeferCleanup(func() {
		stopOperator()
		startOperator()
	})
}

// twoPhase creates a DeleteRequest policy whose pipeline waits settle, and one object it
// protects, armed with the veto.
func twoPhase(ctx context.Context, ns string, settle time.Duration) *corev1.ConfigMap {
	GinkgoHelper()
	p := framework.NamespacedPolicy(ns, "two-phase", framework.WaitStep("settle", settle))
	p.Spec.Trigger = v1alpha1.TriggerDeleteRequest
	Expect(k8s.Create(ctx, p)).To(Succeed())
	cm := framework.ConfigMap(ns, "topic", map[string]string{"app": "two-phase"})
	Expect(k8s.Create(ctx, cm)).To(Succeed())
	Eventually(func() error { return k8s.Delete(ctx, cm, client.DryRunAll) }, 30*time.Second).
		Should(MatchError(ContainSubstring(v1alpha1.AnnotationDeleteRequested)))
	return cm
}

// expectAlive checks that obj exists and is not being deleted.
func expectAlive(ctx context.Context, obj client.Object) func() bool {
	return func() bool {
		cm := &corev1.ConfigMap{}
		return k8s.Get(ctx, client.ObjectKeyFromObject(obj), cm) == nil && cm.DeletionTimestamp == nil
	}
}

var _ = Describe("Two-phase delete on a real control plane", Ordered, func() {
	ctx := context.Background()

	BeforeAll(func() {
		Expect(framework.InstallAdmissionPolicies(ctx, k8s, root)).To(Succeed())
		runOperatorAsServiceAccount(ctx)
	})

	It("takes a namespace's deletion as the request: the pipeline runs with the object alive, then the namespace goes", func() {
		ns := newNamespace(ctx, "two-phase-ns")
		cm := twoPhase(ctx, ns, 5*time.Second)
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		Expect(k8s.Delete(ctx, nsObj)).To(Succeed())
		Eventually(probe.StepPhase(ctx, cm, "settle"), 30*time.Second).Should(Equal(v1alpha1.StepRunning))
		run := probe.RunFor(ctx, cm)()
		Expect(run.Namespace).To(Equal(runNamespace), "nothing can be created in a namespace being deleted")
		Expect(run.Status.RequestedBy).To(Equal("the deletion of namespace " + ns))
		Expect(expectAlive(ctx, cm)()).To(BeTrue(), "the object's controller sees no deletion while the pipeline runs")
		Eventually(probe.Gone(ctx, nsObj), 2*time.Minute, time.Second).Should(BeTrue())
		Expect(probe.RunPhase(ctx, cm)()).To(Equal(v1alpha1.RunSucceeded))
	})

	It("resumes after an operator restart mid pipeline without deleting the object early", func() {
		ns := newNamespace(ctx, "two-phase-restart")
		cm := twoPhase(ctx, ns, 12*time.Second)
		patch := client.MergeFrom(cm.DeepCopy())
		cm.Annotations = map[string]string{v1alpha1.AnnotationDeleteRequested: asRequest(ctx, "restart mid pipeline")}
		Expect(k8s.Patch(ctx, cm, patch)).To(Succeed())
		Eventually(probe.StepPhase(ctx, cm, "settle"), 30*time.Second).Should(Equal(v1alpha1.StepRunning))
		started := probe.RunFor(ctx, cm)().Status.Step("settle").StartTime.Time

		By("the operator stops mid pipeline: the object stays, still refusing a plain delete")
		stopOperator()
		Consistently(expectAlive(ctx, cm), 3*time.Second, 500*time.Millisecond).Should(BeTrue())
		Expect(k8s.Delete(ctx, cm)).To(MatchError(ContainSubstring("deletion requested")))

		By("restarted, it waits out the step before deleting the object")
		startOperatorWith(operatorKubeconfig)
		Consistently(expectAlive(ctx, cm), time.Until(started.Add(10*time.Second)), 500*time.Millisecond).Should(BeTrue())
		Eventually(probe.Gone(ctx, cm), 30*time.Second, 200*time.Millisecond).Should(BeTrue())
		run := probe.RunFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(run.Status.Step("settle").CompletionTime.Time).To(BeTemporally(">=", started.Add(11*time.Second)))
	})
})
