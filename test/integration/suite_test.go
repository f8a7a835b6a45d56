// Package integration runs the teardown engine against a real API server (envtest with etcd and
// kube-apiserver built by `make control-plane`) and asserts on the state of the cluster.
package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine"
	"github.com/teardown-dev/teardown-operator/steps/builtin"
)

const runNamespace = "teardown-system"

var (
	testEnv *envtest.Environment
	cfg     *rest.Config
	k8s     client.Client
	scheme  = runtime.NewScheme()
	// stopOperator stops the operator the suite started; tests that restart it replace it.
	stopOperator func()
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Integration Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(), "KUBEBUILDER_ASSETS must name the folder with etcd and kube-apiserver (make control-plane)")
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: runNamespace}})).To(Succeed())
	stopOperator = startOperator()
})

var _ = AfterSuite(func() {
	if stopOperator != nil {
		stopOperator()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// startOperator runs the engine in this process, as the operator binary would, and returns a
// function that stops it and waits until it has stopped.
func startOperator() func() {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	_, err = engine.Setup(ctx, mgr, engine.Options{
		RunNamespace: runNamespace, TargetWorkers: 4, RunWorkers: 4, StuckAfter: time.Minute, Resync: time.Hour,
	}, builtin.Kinds()...)
	Expect(err).NotTo(HaveOccurred())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	return func() {
		cancel()
		Eventually(done, 30*time.Second).Should(BeClosed())
	}
}

// newNamespace creates a namespace for one test.
func newNamespace(ctx context.Context) string {
	ns := "t-" + rand.String(6)
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	return ns
}

func configMap(ns, name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"k": "v"}}
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// waitStep is a wait step of a fixed duration.
func waitStep(name string, d time.Duration) v1alpha1.Step {
	return v1alpha1.Step{Name: name, Wait: &v1alpha1.WaitStep{Duration: dur(d)}}
}

// namespacedPolicy returns a TeardownPolicy on ConfigMaps labelled app=<name>.
func namespacedPolicy(ns, name string, steps ...v1alpha1.Step) *v1alpha1.TeardownPolicy {
	return &v1alpha1.TeardownPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.TeardownPolicySpec{
			TargetRef: v1alpha1.TargetReference{APIVersion: "v1", Kind: "ConfigMap"},
			Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Pipeline:  v1alpha1.Pipeline{Steps: steps},
		},
	}
}

func finalizerOf(p *v1alpha1.TeardownPolicy) string {
	return "teardownpolicy.teardown.dev/" + p.Name
}

// expectReady waits until the policy reports Ready with the given status.
func expectReady(ctx context.Context, obj client.Object, status metav1.ConditionStatus) *metav1.Condition {
	var cond *metav1.Condition
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		var conds []metav1.Condition
		var gen, observed int64
		switch p := obj.(type) {
		case *v1alpha1.TeardownPolicy:
			conds, gen, observed = p.Status.Conditions, p.Generation, p.Status.ObservedGeneration
		case *v1alpha1.ClusterTeardownPolicy:
			conds, gen, observed = p.Status.Conditions, p.Generation, p.Status.ObservedGeneration
		}
		g.Expect(observed).To(Equal(gen))
		for i := range conds {
			if conds[i].Type == engine.ConditionReady {
				cond = &conds[i]
			}
		}
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(status), "Ready condition: %s: %s", cond.Reason, cond.Message)
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
	return cond
}

// finalizers reads an object's finalizers fresh from the API server.
func finalizers(ctx context.Context, obj client.Object) func() []string {
	return func() []string {
		o := obj.DeepCopyObject().(client.Object)
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), o); err != nil {
			return []string{"<" + err.Error() + ">"}
		}
		return o.GetFinalizers()
	}
}

// gone reports whether the object no longer exists.
func gone(ctx context.Context, obj client.Object) func() bool {
	return func() bool {
		o := obj.DeepCopyObject().(client.Object)
		err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), o)
		return client.IgnoreNotFound(err) == nil && err != nil
	}
}

// runFor finds the run of a target by its UID label, in any namespace.
func runFor(ctx context.Context, target client.Object) func() *v1alpha1.TeardownRun {
	return func() *v1alpha1.TeardownRun {
		var list v1alpha1.TeardownRunList
		if err := k8s.List(ctx, &list, client.MatchingLabels{engine.LabelTargetUID: string(target.GetUID())}); err != nil || len(list.Items) == 0 {
			return nil
		}
		return &list.Items[0]
	}
}

func runPhase(ctx context.Context, target client.Object) func() v1alpha1.RunPhase {
	return func() v1alpha1.RunPhase {
		if r := runFor(ctx, target)(); r != nil {
			return r.Status.Phase
		}
		return ""
	}
}

func stepPhase(ctx context.Context, target client.Object, step string) func() v1alpha1.StepPhase {
	return func() v1alpha1.StepPhase {
		if r := runFor(ctx, target)(); r != nil {
			if s := r.Status.Step(step); s != nil {
				return s.Phase
			}
		}
		return ""
	}
}

// eventReasons lists the reasons of the events recorded about an object.
func eventReasons(ctx context.Context, obj client.Object) func() []string {
	return func() []string {
		var list corev1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
			return nil
		}
		var out []string
		for _, e := range list.Items {
			if e.InvolvedObject.UID == obj.GetUID() {
				out = append(out, e.Reason)
			}
		}
		return out
	}
}

func describe(obj client.Object) string {
	return fmt.Sprintf("%s/%s", obj.GetNamespace(), obj.GetName())
}

// update re-reads obj, applies mutate and writes it, retrying on conflicts with other writers
// (the operator writes finalizers and status concurrently).
func update[T client.Object](ctx context.Context, obj T, mutate func(T)) {
	Eventually(func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate(obj)
		return k8s.Update(ctx, obj)
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
}
