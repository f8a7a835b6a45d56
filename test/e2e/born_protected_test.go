package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

var _ = Describe("Born protected on a real control plane", func() {
	ctx := context.Background()

	It("arms matching objects at creation while the operator is stopped, runs their pipelines once it is back, and drain removes the admission policy", func() {
		const n = 20
		ns, other := newNamespace(ctx, "born"), newNamespace(ctx, "born-other")
		p := framework.NamespacedPolicy(ns, "born", framework.WaitStep("snapshot", 0))
		p.Spec.Match = "has(object.data) && 'tier' in object.data && object.data.tier == 'db'"
		Expect(k8s.Create(ctx, p)).To(Succeed())
		fin := "teardownpolicy.teardown.dev/born"
		Eventually(func() string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionProtectedFromCreation)
			if c == nil {
				return ""
			}
			return c.Reason
		}, 30*time.Second, 200*time.Millisecond).Should(Equal(v1alpha1.ReasonArmedAtAdmission))
		object := func(ns, name, app, tier string) *corev1.ConfigMap {
			cm := framework.ConfigMap(ns, name, map[string]string{"app": app})
			cm.Data = map[string]string{"tier": tier}
			return cm
		}
		// A dry-run create goes through admission and stores nothing: what the API server would
		// arm now. It loads the admission policy from its own watch, moments after it is written.
		armedNow := func() []string {
			probe := object(ns, "probe", "born", "db")
			Expect(k8s.Create(ctx, probe, client.DryRunAll)).To(Succeed())
			return probe.Finalizers
		}
		Eventually(armedNow, 10*time.Second, 100*time.Millisecond).Should(ContainElement(fin))

		By("stopping the operator, then creating objects")
		stopOperator()
		DeferCleanup(func() {
			if operator == nil {
				startOperator()
			}
		})
		var armed []*corev1.ConfigMap
		for i := range n {
			cm := object(ns, fmt.Sprintf("db-%02d", i), "born", "db")
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			Expect(cm.Finalizers).To(ConsistOf(fin), "%s: the create's answer carries the finalizer", cm.Name)
			armed = append(armed, cm)
		}
		for _, cm := range []*corev1.ConfigMap{object(ns, "cache", "born", "cache"), object(ns, "other-app", "other", "db"), object(other, "db", "born", "db")} {
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			Expect(cm.Finalizers).To(BeEmpty(), "%s/%s: match false, another label or another namespace", cm.Namespace, cm.Name)
		}

		By("deleting them while the operator is stopped: they wait")
		for _, cm := range armed {
			Expect(k8s.Delete(ctx, cm)).To(Succeed())
		}
		Consistently(func() int {
			waiting := 0
			for _, cm := range armed {
				var got corev1.ConfigMap
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(cm), &got); err == nil && got.DeletionTimestamp != nil {
					waiting++
				}
			}
			return waiting
		}, 3*time.Second, 500*time.Millisecond).Should(Equal(n))

		By("starting the operator: every pipeline runs, and the objects go")
		startOperator()
		for _, cm := range armed {
			Eventually(probe.Gone(ctx, cm), 60*time.Second, 200*time.Millisecond).Should(BeTrue(), cm.Name)
		}
		Eventually(func() int64 {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			return p.Status.Teardowns.Succeeded
		}, 30*time.Second, 500*time.Millisecond).Should(BeEquivalentTo(n), "each object's teardown is counted in the policy's status")

		By("drain, with the operator stopped, removes the admission policy before it releases anything")
		stopOperator()
		out, errOut, code := kubectlTeardown("drain", "--policy", "TeardownPolicy/born", "-n", ns)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(ContainSubstring("removed 1 MutatingAdmissionPolicy (and its binding) that arms objects at creation"))
		name := naming.ArmingPolicyName(ns, p.Name)
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: name}, &admissionv1.MutatingAdmissionPolicy{}))).To(BeTrue())
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: name}, &admissionv1.MutatingAdmissionPolicyBinding{}))).To(BeTrue())
		Eventually(armedNow, 10*time.Second, 100*time.Millisecond).ShouldNot(ContainElement(fin))

		By("the operator back, it makes them again")
		startOperator()
		Eventually(func() error {
			return k8s.Get(ctx, client.ObjectKey{Name: name}, &admissionv1.MutatingAdmissionPolicyBinding{})
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(probe.Gone(ctx, p), 30*time.Second).Should(BeTrue())
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: name}, &admissionv1.MutatingAdmissionPolicy{}))).To(BeTrue())
	})
})
