package engine

import (
	"context"
	"fmt"
	"time"
	"unique"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/eventsink"
	"github.com/teardown-dev/teardown-operator/engine/ownwrites"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/fence"
	"github.com/teardown-dev/teardown-operator/internal/kindtypes"
	"github.com/teardown-dev/teardown-operator/steps"
)

// The run cache's indexes (clusterReads).
const (
	indexTargetUID = "teardown.dev/target-uid"
	indexPolicy    = "teardown.dev/policy"
)

// Options configure the engine.
type Options struct {
	// RunNamespace holds the runs of cluster-scoped targets and of targets whose namespace is
	// being deleted (nothing can be created there). Usually the operator's own namespace.
	RunNamespace string
	// TargetWorkers and RunWorkers are the concurrent reconciles of targets and runs.
	TargetWorkers int
	RunWorkers    int
	// RunRetention is how long finished runs are kept; 0 keeps them forever.
	RunRetention time.Duration
	// StuckAfter is how long a target may be terminating before its run counts as stuck.
	StuckAfter time.Duration
	// Resync is the period of the dynamic informers' resync.
	Resync time.Duration
	// DisableAdmissionArming stops the operator from keeping a MutatingAdmissionPolicy per policy
	// that arms its targets at creation (policy_arming.go); it removes those it made.
	DisableAdmissionArming bool
	// ArmingBudget bounds the admission policies that arm objects at creation; the zero value
	// bounds nothing (cmd/teardown-operator passes DefaultArmingBudget unless told otherwise).
	ArmingBudget ArmingBudget
	// Fence is checked before side effects outside the API server (steps.Deps.Fence) and before
	// every write of the metadata client, which goes past the manager's client (fenced on its
	// own); nil allows always.
	Fence func() error
}

// Engine wires the reconcilers together.
type Engine struct {
	opts     Options
	client   client.Client
	reader   client.Reader
	runs     *runReconciler
	registry *policy.Registry
	compiler *policy.Compiler
	watches  *watch.Manager
	events   *eventsink.Sink
	metrics  *metrics

	wake    *wakeups
	reads   clusterReads
	fin     *finalizerWriter
	lookups *interest[reconcile.Request]
	// guards records the kinds the deletion guards of protected objects look up.
	guards  *interest[TargetKey]
	written *ownwrites.Versions[types.NamespacedName]
	// released are the finalizers this engine removed that the target cache may still show.
	released *ownwrites.Releases[TargetKey]
	// echoes are the finalizer writes of live objects whose watch events are not reconciled.
	echoes *ownwrites.Echoes[TargetKey]
	kinds  steps.Registry
	// matchErrs are the objects whose match fails to evaluate, per policy.
	matchErrs *policyObjects
	// matchRejects are the objects whose labels a policy selects and whose match is false.
	matchRejects *policyObjects
	// history are the teardowns that ended and are not in their policy's status yet.
	history *teardownHistory
	// served tells whether a watched target kind is still served.
	served servedKinds
	// router passes the dynamic informers' events to the handler of each concern.
	router *router
	// arming keeps the admission policies that arm targets at creation.
	arming *admissionArming
	// lead says since when this process leads: deletions before then may be a predecessor's.
	lead *leadership
}

var namespaceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}

// TargetKey identifies one object of some target kind. It is the target queue's item and the key
// of the maps that follow writes in flight, so with 10,000 deletions queued it exists several
// times over per object: the kind is an interned handle (8 bytes, where a GroupVersionKind is 48).
type TargetKey struct {
	kind      unique.Handle[schema.GroupVersionKind]
	Namespace string
	Name      string
}

// NewTargetKey is the key of object namespace/name of kind gvk.
func NewTargetKey(gvk schema.GroupVersionKind, namespace, name string) TargetKey {
	return TargetKey{kind: unique.Make(gvk), Namespace: namespace, Name: name}
}

// GVK is the object's kind.
func (k TargetKey) GVK() schema.GroupVersionKind {
	var zero unique.Handle[schema.GroupVersionKind]
	if k.kind == zero {
		return schema.GroupVersionKind{}
	}
	return k.kind.Value()
}

// targetKeyOf is the key of the object a run tears down.
func targetKeyOf(t v1alpha1.TargetObjectReference) TargetKey {
	return NewTargetKey(t.GroupVersionKind(), t.Namespace, t.Name)
}

func (k TargetKey) String() string {
	return fmt.Sprintf("%s %s/%s", k.GVK().Kind, k.Namespace, k.Name)
}

// Setup builds the engine and registers its controllers and watches with mgr.
func Setup(ctx context.Context, mgr manager.Manager, opts Options, kinds ...steps.Factory) (*Engine, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	env, err := expr.NewEnv()
	if err != nil {
		return nil, err
	}
	mc, err := metadataClient(mgr.GetConfig(), opts.Fence)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		opts:         opts,
		client:       client.WithFieldOwner(mgr.GetClient(), FieldManager),
		reader:       mgr.GetAPIReader(),
		registry:     policy.NewRegistry(),
		lookups:      newInterest[reconcile.Request](),
		guards:       newInterest[TargetKey](),
		written:      ownwrites.NewVersions[types.NamespacedName](),
		released:     ownwrites.NewReleases[TargetKey](),
		echoes:       ownwrites.NewEchoes[TargetKey](),
		matchErrs:    newPolicyObjects(),
		matchRejects: newPolicyObjects(),
		metrics:      newMetrics(),
		router:       &router{},
		lead:         &leadership{},
	}
	e.reads = clusterReads{client: e.client, admission: e.reader}
	e.wake = newWakeups(e.registry)
	e.history = newTeardownHistory(func(key policy.Key, after time.Duration) { e.wake.recountPolicyAfter(key, max(after, recountDelay)) })
	if e.events, err = eventsink.Setup(mgr, e.reads.namespaceTerminating); err != nil {
		return nil, err
	}
	deps := steps.Deps{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Mapper: mgr.GetRESTMapper(),
		Wake:   func(run types.NamespacedName) { e.wake.runs.Add(reconcile.Request{NamespacedName: run}) },
		Config: mgr.GetConfig(), NamespaceTerminating: e.reads.namespaceTerminating, Fence: opts.Fence}
	e.kinds = steps.Build(kinds, deps)
	if err := e.setupDiscovery(mgr, env); err != nil {
		return nil, err
	}
	e.watches = watch.NewManager(mc, mgr.GetRESTMapper(), e.router.route, opts.Resync, ctrl.Log.WithName("watch"))
	e.wake.watches = e.watches
	if e.served, err = e.newServedKinds(mgr.GetConfig()); err != nil {
		return nil, err
	}
	e.fin = &finalizerWriter{client: e.client, metadata: mc, reader: e.reader, watches: e.watches}
	if err := mgr.Add(e.watches); err != nil {
		return nil, err
	}
	if err := mgr.Add(e.lead); err != nil {
		return nil, err
	}
	if opts.RunRetention > 0 {
		if err := mgr.Add(&retentionSweeper{client: e.client, reader: e.reader, retention: opts.RunRetention}); err != nil {
			return nil, err
		}
	}
	if err := e.indexRuns(ctx, mgr); err != nil {
		return nil, err
	}
	if err := e.setupControllers(mgr); err != nil {
		return nil, err
	}
	return e, nil
}

// setupDiscovery builds what reads the cluster's discovery: the compiler (kinds' scopes and CEL
// types, the API server's version for admission matches) and admission arming.
func (e *Engine) setupDiscovery(mgr manager.Manager, env *expr.Env) error {
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("engine: discovery client: %w", err)
	}
	if e.arming, err = newAdmissionArming(e.client, e.reader, mgr.GetRESTMapper(), newSchemaGate(dc.OpenAPIV3()), e.opts.DisableAdmissionArming, e.opts.ArmingBudget); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if err := e.arming.setup(mgr); err != nil {
		return err
	}
	e.compiler = policy.NewCompiler(env, e.kinds, policy.KindScope(mgr.GetRESTMapper())).
		WithKindTypes(kindtypes.NewDiscovery(dc.OpenAPIV3()).Type).
		WithAPIServerVersion(serverVersion(dc))
	return nil
}

// serverVersion is the API server's major.minor version, or nil when discovery cannot tell.
func serverVersion(dc discovery.DiscoveryInterface) *version.Version {
	info, err := dc.ServerVersion()
	if err != nil {
		return nil
	}
	v, err := version.ParseGeneric(info.GitVersion)
	if err != nil {
		return nil
	}
	return version.MajorMinor(v.Major(), v.Minor())
}

// withDefaults checks the options and fills in the worker counts left unset.
func (o Options) withDefaults() (Options, error) {
	if o.RunNamespace == "" {
		return o, fmt.Errorf("engine: RunNamespace is required")
	}
	o.TargetWorkers, o.RunWorkers = max(o.TargetWorkers, 1), max(o.RunWorkers, 1)
	return o, nil
}

// Shutdown sends the events the engine still holds, for up to 5 s, and stops sending. Call it
// once the manager has stopped: its reconcilers emit events until their last pass ends.
func (e *Engine) Shutdown() {
	e.events.Shutdown()
}

// metadataClient builds the client of the target watches and of the finalizer writes. It does
// not go through the manager's fenced client, so its transport carries the fence: whatever
// writes through it later is refused once the lease may be lost.
func metadataClient(cfg *rest.Config, fenceCheck func() error) (metadata.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	if fenceCheck != nil {
		cfg.Wrap(fence.Transport(fenceCheck))
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	return mc, nil
}

// indexRuns indexes the cached runs by target UID and by policy, on the run informer itself, and
// keeps its indexer for clusterReads. Before the controllers are set up: they take e.reads. The
// indexer is read without the cache reader's wait for sync: the manager syncs its caches before it
// starts any controller or watch of ours, and GetInformer on a cache already started waits for it.
func (e *Engine) indexRuns(ctx context.Context, mgr manager.Manager) error {
	inf, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.TeardownRun{})
	if err != nil {
		return fmt.Errorf("run informer: %w", err)
	}
	shared, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return fmt.Errorf("run informer: a %T has no indexer", inf)
	}
	if err := shared.AddIndexers(runIndexers); err != nil {
		return fmt.Errorf("indexing runs: %w", err)
	}
	e.reads.runs = shared.GetIndexer()
	return nil
}

// runOfOwned maps an object a step created to the run its labels name.
func runOfOwned(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[v1alpha1.LabelRun] == "" || l[v1alpha1.LabelRunNamespace] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[v1alpha1.LabelRunNamespace], Name: l[v1alpha1.LabelRun]}}}
}

// namespaceChanged re-examines what a namespace's labels or deletion affect.
func (e *Engine) namespaceChanged(ns string) {
	seen := map[schema.GroupVersionKind]bool{}
	for _, gvk := range e.registry.GVKs() {
		for _, p := range e.registry.ForGVK(gvk) {
			if p.Key.Namespaced() && p.Key.Namespace == ns {
				e.wake.policies[policy.KindNamespaced].Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: p.Key.Name}})
			}
			// A two-phase policy takes a namespace's deletion as a request to delete its objects.
			if (p.NamespaceSelector != nil || p.TwoPhase() || p.Key.Namespaced() && p.Key.Namespace == ns) && !seen[gvk] {
				seen[gvk] = true
				e.wake.enqueueTargets(gvk, ns)
			}
		}
	}
}

type (
	eventCreate = event.CreateEvent
	eventUpdate = event.UpdateEvent
)

func equalStrings(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
