// Command teardown-operator runs the teardown engine: it protects the objects TeardownPolicies
// select with finalizers and runs each policy's pipeline before such an object is deleted.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine"
	"github.com/teardown-dev/teardown-operator/internal/faultinject"
	"github.com/teardown-dev/teardown-operator/steps/builtin"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"

	_ "golang.org/x/crypto/x509roots/fallback" // CA roots for https when the system has none (the scratch image)
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "teardown-operator:", err)
		os.Exit(1)
	}
}

// options are the operator's flags.
type options struct {
	metrics                               metricsFlags
	probeAddr, pprofAddr, leaderNS, runNS string
	leaderElect, admissionArming          bool
	targetWorkers, runWorkers             int
	retention, stuckAfter, resync         time.Duration
	qps                                   float64
	burst, httpInFlight                   int
	httpInlineWait                        time.Duration
	httpAllowed                           string
	armingBudget                          engine.ArmingBudget
	zap                                   zap.Options
}

// parseFlags reads the command line into options.
func parseFlags() *options {
	o := &options{}
	o.metrics.bind(flag.CommandLine)
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address to serve Go's profiles (/debug/pprof) on, for diagnosis; empty (the default) serves none.")
	flag.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader, so that only one replica acts at a time.")
	flag.BoolVar(&o.admissionArming, "admission-arming", true,
		"Keep a MutatingAdmissionPolicy per Ready policy that adds its finalizer to matching objects at creation, whether or not the operator runs (where the cluster serves them); false removes those the operator made.")
	flag.IntVar(&o.armingBudget.Total, "max-arming-policies", engine.DefaultArmingBudget.Total,
		"Most MutatingAdmissionPolicies the operator keeps to arm objects at creation for TeardownPolicies, one per Ready policy (ClusterTeardownPolicies are not bounded); policies past it are armed by the operator once it sees their objects. 0: no bound.")
	flag.IntVar(&o.armingBudget.PerNamespace, "max-arming-policies-per-namespace", engine.DefaultArmingBudget.PerNamespace,
		"Most of those for the TeardownPolicies of one namespace, so that one tenant cannot take them all. 0: no bound.")
	flag.StringVar(&o.leaderNS, "leader-election-namespace", "", "Namespace of the leader election lease (default: the run namespace).")
	flag.StringVar(&o.runNS, "run-namespace", envOr("POD_NAMESPACE", "teardown-system"),
		"Namespace for the TeardownRuns of cluster-scoped targets and of targets whose namespace is being deleted. It must exist.")
	flag.IntVar(&o.targetWorkers, "target-workers", 16, "Targets reconciled concurrently (finalizers, and the first pass of each teardown).")
	flag.IntVar(&o.runWorkers, "run-workers", 16, "Runs reconciled concurrently (pipeline steps).")
	flag.DurationVar(&o.retention, "run-retention", 7*24*time.Hour, "How long finished TeardownRuns are kept; 0 keeps them forever.")
	flag.DurationVar(&o.stuckAfter, "stuck-after", 15*time.Minute,
		"How long a run may be unfinished (or failed and keeping its object) before it counts as stuck (teardown_runs_stuck, status.stuckRuns).")
	flag.DurationVar(&o.resync, "resync-period", 10*time.Hour, "Resync period of the target watches.")
	flag.Float64Var(&o.qps, "kube-api-qps", -1, "Client-side limit on API requests per second; negative disables it and leaves fairness to the API server (API Priority and Fairness).")
	flag.IntVar(&o.burst, "kube-api-burst", 0, "Client-side burst of API requests, when --kube-api-qps is positive.")
	flag.StringVar(&o.httpAllowed, "http-allowed-destinations", "",
		"Comma-separated IP addresses or CIDR ranges, each optionally with :port (\"10.20.0.0/16\", \"127.0.0.1:8443\", \"[fd00::1]:443\"), "+
			"that http steps of TeardownPolicies may reach although they are loopback, link-local, private or the API server. "+
			"ClusterTeardownPolicies are not restricted.")
	flag.IntVar(&o.httpInFlight, "http-max-in-flight", httpstep.DefaultMaxInFlight, "HTTP requests of http steps running at once; more wait for a free slot.")
	flag.DurationVar(&o.httpInlineWait, "http-inline-wait", httpstep.DefaultInlineWait,
		"How long a reconcile waits for an http step's response before it frees its worker; a later response wakes the run. 0 never waits.")
	o.zap.BindFlags(flag.CommandLine)
	flag.Parse()
	if o.leaderNS == "" {
		o.leaderNS = o.runNS
	}
	return o
}

func run() error {
	o := parseFlags()
	ctrl.SetLogger(newLogger(o.zap))
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cfg.UserAgent = "teardown-operator"
	if err := faultinject.Install(cfg); err != nil { // only in a build for the fault suite (tag faultinject)
		return err
	}
	httpOpts, err := httpOptions(o.httpAllowed, o.httpInFlight, cfg.Host)
	if err != nil {
		return err
	}
	httpOpts.InlineWait = o.httpInlineWait
	if o.httpInlineWait <= 0 {
		httpOpts.InlineWait = -1 // httpstep.Options: negative is "never", 0 the default
	}
	ctx := ctrl.SetupSignalHandler()
	if err := checkNamespace(ctx, cfg, scheme, o.runNS); err != nil {
		return err
	}
	mgr, eng, err := newManager(ctx, cfg, scheme, o, httpOpts)
	if err != nil {
		return err
	}
	ctrl.Log.Info("starting", "runNamespace", o.runNS, "targetWorkers", o.targetWorkers, "runWorkers", o.runWorkers)
	err = mgr.Start(ctx)
	eng.Shutdown()
	return err
}

// newManager builds the manager with the engine, its step kinds and the health checks.
func newManager(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, o *options, httpOpts httpstep.Options) (ctrl.Manager, *engine.Engine, error) {
	metrics, err := o.metrics.serverOptions()
	if err != nil {
		return nil, nil, err
	}
	mo := ctrl.Options{
		Logger:                 releasedLeaseLogger(ctx, ctrl.Log),
		Scheme:                 scheme,
		Cache:                  engine.CacheOptions(builtin.CacheOptions()),
		Metrics:                metrics,
		HealthProbeBindAddress: o.probeAddr,
		PprofBindAddress:       o.pprofAddr,
	}
	lock, err := leaderOptions(&mo, cfg, o)
	if err != nil {
		return nil, nil, err
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil && strings.Contains(err.Error(), "no matches for kind") {
		return nil, nil, fmt.Errorf("creating manager: %w; the teardown.dev CRDs are not installed, or not established yet: install them (kubectl apply -f config/crd/bases) and start the operator again", err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("creating manager: %w", err)
	}
	eng, err := engine.Setup(ctx, mgr, engine.Options{
		RunNamespace:  o.runNS,
		TargetWorkers: o.targetWorkers,
		RunWorkers:    o.runWorkers,
		RunRetention:  o.retention,
		StuckAfter:    o.stuckAfter,
		Resync:        o.resync,
		Fence:         lock.Check,

		DisableAdmissionArming: !o.admissionArming,
		ArmingBudget:           o.armingBudget,
	}, builtin.Kinds(builtin.Options{HTTP: httpOpts})...)
	if err != nil {
		return nil, nil, err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, nil, err
	}
	return mgr, eng, mgr.AddReadyzCheck("readyz", healthz.Ping)
}

// httpOptions reads the http step's flags. The API server is refused for TeardownPolicies by its
// address as this process reaches it and by the in-cluster service address.
func httpOptions(allowed string, inFlight int, apiHost string) (httpstep.Options, error) {
	opts := httpstep.Options{MaxInFlight: inFlight, UserAgent: "teardown-operator"}
	for _, s := range strings.Split(allowed, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		d, err := httpstep.ParseDestination(s)
		if err != nil {
			return opts, fmt.Errorf("--http-allowed-destinations: %w", err)
		}
		opts.AllowedDestinations = append(opts.AllowedDestinations, d)
	}
	if apiHost != "" {
		// Whole, scheme included: the guard takes the port from it (or the scheme's default).
		opts.APIServerHosts = append(opts.APIServerHosts, apiHost)
	}
	if h := os.Getenv("KUBERNETES_SERVICE_HOST"); h != "" {
		opts.APIServerHosts = append(opts.APIServerHosts, net.JoinHostPort(h, envOr("KUBERNETES_SERVICE_PORT", "443")))
	}
	return opts, nil
}

// checkNamespace fails with what to do when the run namespace does not exist: the operator cannot
// record runs of cluster-scoped objects (or hold its lease) without it, and would otherwise only
// log the API server's refusals over and over.
func checkNamespace(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, ns string) error {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	err = c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("namespace %q (--run-namespace) does not exist: create it (kubectl create namespace %s) or set --run-namespace to an existing namespace", ns, ns)
	case apierrors.IsForbidden(err):
		return nil // not allowed to read namespaces here: the first write will tell
	case err != nil:
		return fmt.Errorf("checking namespace %q (--run-namespace): %w", ns, err)
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
