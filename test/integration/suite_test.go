// Package integration runs the teardown engine against a real API server (envtest with etcd and
// kube-apiserver built by `make control-plane`) and asserts on the state of the cluster.
package integration

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
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
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

const runNamespace = "teardown-system"

var (
	testEnv *envtest.Environment
	cfg     *rest.Config
	k8s     client.Client
	scheme  = runtime.NewScheme()
	// stopOperator stops the operator the suite started; tests that restart it replace it.
	stopOperator func()
	// api is the loopback HTTP server http steps call; TeardownPolicies may reach it (and only
	// it) among loopback addresses. forbidden is another loopback server that they may not.
	api, forbidden *endpoint
	httpOptions    httpstep.Options
	// metricsAddr is where the operator serves its metrics, scraped like Prometheus would.
	metricsAddr string
)

// stuckAfter is the operator's --stuck-after in this suite: short, so specs see runs cross it.
const stuckAfter = 6 * time.Second

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
	// Requests (delete-requested, abandon, retry) count only while the admission policy that
	// checks them is in force, as in any install.
	Expect(framework.InstallRequestsPolicy(context.Background(), k8s, filepath.Join("..", ".."))).To(Succeed())
	Expect(framework.AwaitRequestsTrusted(context.Background(), k8s)).To(Succeed())
	me, err := framework.Request(context.Background(), k8s, "")
	Expect(err).NotTo(HaveOccurred())
	adminName = strings.TrimSuffix(me, ": ")
	api, forbidden = newEndpoint(), newEndpoint()
	allowed, err := httpstep.ParseDestination(api.srv.Listener.Addr().String())
	Expect(err).NotTo(HaveOccurred())
	httpOptions = httpstep.Options{AllowedDestinations: []httpstep.Destination{allowed}, APIServerHosts: []string{cfg.Host}}
	metricsAddr = freeLoopbackAddr()
	stopOperator = startOperator()
})

var _ = AfterSuite(func() {
	if stopOperator != nil {
		stopOperator()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
	for _, e := range []*endpoint{api, forbidden} {
		if e != nil {
			e.srv.Close()
		}
	}
})

// adminName is the user name of the suite's client (k8s), as the API server authenticates it.
var adminName string

// asRequest is the value of a request annotation (delete-requested, abandon, retry) that the
// suite's client sets: "<its user name>: <why>", as the admission policy that checks requests
// admits.
func asRequest(why string) string { return adminName + ": " + why }

// startOperator runs the engine in this process, as the operator binary would, and returns a
// function that stops it and waits until it has stopped.
func startOperator() func() {
	return startOperatorWith(func(*engine.Options) {})
}

// restartOperatorWith restarts the operator with the suite's options changed by edit, for the rest
// of the spec; the operator with the suite's own options comes back after it.
func restartOperatorWith(edit func(*engine.Options)) {
	stopOperator()
	stopOperator = startOperatorWith(edit)
	DeferCleanup(func() {
		stopOperator()
		stopOperator = startOperator()
	})
}

// startOperatorWith starts the operator with the suite's options changed by edit.
func startOperatorWith(edit func(*engine.Options)) func() {
	return startOperatorOn(cfg, edit)
}

// restartOperatorAsServiceAccount restarts the operator, for the rest of the spec (or ordered
// container), as the service account an install gives it, bound to the shipped ClusterRole, with
// no more rights than an install has.
func restartOperatorAsServiceAccount(ctx context.Context) {
	GinkgoHelper()
	restartOperatorAs(ctx, framework.OperatorNamespace, framework.OperatorName)
}

// restartOperatorAs restarts the operator, for the rest of the spec (or ordered container), as
// the service account namespace/name bound to the shipped ClusterRole (an install into another
// namespace, or under another name).
func restartOperatorAs(ctx context.Context, namespace, name string) {
	GinkgoHelper()
	Expect(framework.BindOperatorRole(ctx, k8s, filepath.Join("..", ".."), namespace, name)).To(Succeed())
	stopOperator()
	stopOperator = startOperatorOn(framework.AsServiceAccount(cfg, namespace, name), func(*engine.Options) {})
	DeferCleanup(func() {
		stopOperator()
		stopOperator = startOperator()
	})
}

// operatorStartedAt is when the running operator was started.
var operatorStartedAt time.Time

// waitPastOperatorStart waits until the running operator has led for long enough that a
// deletion now is its own: one within a second or so of its start counts as a predecessor's
// (engine/leadership.go) and its first pass reads the object from the API server, which a spec of
// the first pass that starts from the cache must not be given. The operator leads once its
// caches have synced, a second or two after its start here.
func waitPastOperatorStart() {
	time.Sleep(time.Until(operatorStartedAt.Add(5 * time.Second)))
}

// startOperatorOn starts the operator on the API server cfg names, as the user it names.
func startOperatorOn(cfg *rest.Config, edit func(*engine.Options)) func() {
	operatorStartedAt = time.Now()
	opts := engine.Options{
		RunNamespace: runNamespace, TargetWorkers: 4, RunWorkers: 4, StuckAfter: stuckAfter, Resync: time.Hour,
	}
	edit(&opts)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  engine.CacheOptions(builtin.CacheOptions()),
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	eng, err := engine.Setup(ctx, mgr, opts, builtin.Kinds(builtin.Options{HTTP: httpOptions})...)
	Expect(err).NotTo(HaveOccurred())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
		eng.Shutdown() // as the operator's main does once its manager has stopped
	}()
	return func() {
		cancel()
		Eventually(done, 30*time.Second).Should(BeClosed())
	}
}

// freeLoopbackAddr returns a loopback address with a port no one listens on now.
func freeLoopbackAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().String()
}

// newNamespace creates a namespace for one test.
func newNamespace(ctx context.Context) string {
	ns := "t-" + rand.String(6)
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	return ns
}

var (
	configMap        = framework.ConfigMap
	dur              = framework.Dur
	waitStep         = framework.WaitStep
	namespacedPolicy = framework.NamespacedPolicy
)

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
			if conds[i].Type == v1alpha1.ConditionReady {
				cond = &conds[i]
			}
		}
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(status), "Ready condition: %s: %s", cond.Reason, cond.Message)
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
	return cond
}

func probe() framework.Probe { return framework.Probe{Client: k8s} }

func finalizers(ctx context.Context, obj client.Object) func() []string {
	return probe().Finalizers(ctx, obj)
}
func gone(ctx context.Context, obj client.Object) func() bool { return probe().Gone(ctx, obj) }
func runFor(ctx context.Context, target client.Object) func() *v1alpha1.TeardownRun {
	return probe().RunFor(ctx, target)
}
func teardownOf(ctx context.Context, policy, target client.Object) func() *v1alpha1.RecentTeardown {
	return probe().TeardownOf(ctx, policy, target)
}
func runPhase(ctx context.Context, target client.Object) func() v1alpha1.RunPhase {
	return probe().RunPhase(ctx, target)
}
func stepPhase(ctx context.Context, target client.Object, step string) func() v1alpha1.StepPhase {
	return probe().StepPhase(ctx, target, step)
}
func eventReasons(ctx context.Context, obj client.Object) func() []string {
	return probe().EventReasons(ctx, obj)
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

// setLease writes the operator's leader election lease in the run namespace as a replica left
// it: renewed at renewed, for duration; the suite's operator runs without leader election, so
// the lease says what the spec wants.
func setLease(ctx context.Context, holder string, renewed time.Time, duration time.Duration) *coordinationv1.Lease {
	GinkgoHelper()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: runNamespace, Name: v1alpha1.LeaderElectionLease}}
	_ = k8s.Delete(ctx, lease)
	lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(duration / time.Second)),
		AcquireTime: ptr.To(metav1.NewMicroTime(renewed.Add(-time.Hour))), RenewTime: ptr.To(metav1.NewMicroTime(renewed))}
	Eventually(func() error { return k8s.Create(ctx, lease) }, 5*time.Second).Should(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, lease))).To(Succeed()) })
	return lease
}
