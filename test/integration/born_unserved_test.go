package integration

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine"
	"github.com/teardown-dev/teardown-operator/steps/builtin"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// A cluster whose API server does not serve MutatingAdmissionPolicy (before Kubernetes 1.36, or
// with the API turned off): an API server of its own, started with the resource disabled.
var _ = Describe("Born protected, on a cluster without MutatingAdmissionPolicy", Ordered, func() {
	ctx := context.Background()
	var c client.Client

	BeforeAll(func() {
		env := &envtest.Environment{
			CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
			ErrorIfCRDPathMissing: true,
		}
		apiServer := env.ControlPlane.GetAPIServer()
		apiServer.Configure().
			Set("runtime-config", "admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false,admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false").
			Set("disable-admission-plugins", "MutatingAdmissionPolicy")
		cfg, err := env.Start()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) })
		c, err = client.New(cfg, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: runNamespace}})).To(Succeed())

		mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Cache: engine.CacheOptions(builtin.CacheOptions()),
			Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
		Expect(err).NotTo(HaveOccurred())
		opctx, cancel := context.WithCancel(ctx)
		eng, err := engine.Setup(opctx, mgr, engine.Options{RunNamespace: runNamespace, Resync: time.Hour}, builtin.Kinds(builtin.Options{})...)
		Expect(err).NotTo(HaveOccurred(), "the operator starts where MutatingAdmissionPolicy is not served")
		done := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			Expect(mgr.Start(opctx)).To(Succeed())
			eng.Shutdown()
		}()
		DeferCleanup(func() {
			cancel()
			Eventually(done, 30*time.Second).Should(BeClosed())
		})
	})

	It("arms as before, and says why objects are not protected from their creation", func() {
		ns := "unserved"
		Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		p := framework.NamespacedPolicy(ns, "fallback", framework.WaitStep("noop", 0))
		Expect(c.Create(ctx, p)).To(Succeed())
		probe := framework.Probe{Client: c}
		Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			cond := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionProtectedFromCreation)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(v1alpha1.ReasonAdmissionUnavailable))
			g.Expect(cond.Message).To(ContainSubstring("does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy"))
		}, 20*time.Second).Should(Succeed())
		cm := framework.ConfigMap(ns, "db", map[string]string{"app": p.Name})
		Expect(c.Create(ctx, cm)).To(Succeed())
		Expect(cm.Finalizers).To(BeEmpty(), "nothing arms it at its creation")
		Eventually(probe.Finalizers(ctx, cm), 10*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/fallback"))
		Expect(c.Delete(ctx, cm)).To(Succeed())
		Eventually(probe.Gone(ctx, cm), 10*time.Second).Should(BeTrue())
	})
})
