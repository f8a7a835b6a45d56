package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/expr"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Labels, annotations and finalizers the engine owns.
const (
	// AnnotationAbandon on a target breaks glass: its runs skip their remaining steps and release
	// the target. The value should say who asks and why; it is recorded in the run.
	AnnotationAbandon = "teardown.dev/abandon"
	// FinalizerRun keeps a run while its pipeline is in flight, so that deleting its namespace
	// (or the run) cannot lose the pipeline's state.
	FinalizerRun = "teardown.dev/run-in-progress"
	// FinalizerPolicy keeps a policy until its targets are released and its runs are done.
	FinalizerPolicy = "teardown.dev/release-targets"

	LabelPolicyKind      = "teardown.dev/policy-kind"
	LabelPolicy          = "teardown.dev/policy"
	LabelPolicyNamespace = "teardown.dev/policy-namespace"
	LabelTargetUID       = "teardown.dev/target-uid"
	LabelTargetKind      = "teardown.dev/target-kind"
	LabelTargetNamespace = "teardown.dev/target-namespace"
	LabelTargetName      = "teardown.dev/target-name"

	indexTargetUID = "spec.target.uid"
	indexPolicy    = "spec.policyRef"
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
}

// KindFactory builds a step kind from the engine's dependencies.
type KindFactory func(Deps) steps.Kind

// Deps are what step kinds may use.
type Deps struct {
	Client client.Client
	// Reader reads from the API server, bypassing the cache (for objects the operator does not
	// watch, such as Secrets).
	Reader client.Reader
	Lister *Lister
	// Wake queues a run for a reconcile now, for a step whose work finished outside a reconcile
	// (an HTTP response that came after the reconcile stopped waiting for it).
	Wake func(run types.NamespacedName)
	// Config is the manager's REST config, for clients the controller-runtime client cannot
	// replace (pod logs).
	Config *rest.Config
	// NamespaceTerminating reports whether a namespace is being deleted, from the cache.
	NamespaceTerminating func(ctx context.Context, namespace string) bool
}

// Engine wires the reconcilers together.
type Engine struct {
	opts     Options
	client   client.Client
	reader   client.Reader
	registry *policy.Registry
	compiler *policy.Compiler
	watches  *watch.Manager
	events   *eventSink
	metrics  *metrics

	targets  queueRef[TargetKey]
	runs     queueRef[reconcile.Request]
	policies map[string]*queueRef[reconcile.Request]
	lookups  *interest
	written  *writtenVersions
	kinds    steps.Registry
	// matchErrs are the objects whose match fails to evaluate, per policy.
	matchErrs *matchErrors
}

var namespaceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}

// TargetKey identifies one object of some target kind.
type TargetKey struct {
	GVK       schema.GroupVersionKind
	Namespace string
	Name      string
}

func (k TargetKey) String() string {
	return fmt.Sprintf("%s %s/%s", k.GVK.Kind, k.Namespace, k.Name)
}

// Setup builds the engine and registers its controllers and watches with mgr.
func Setup(ctx context.Context, mgr manager.Manager, opts Options, kinds ...KindFactory) (*Engine, error) {
	if opts.RunNamespace == "" {
		return nil, fmt.Errorf("engine: RunNamespace is required")
	}
	if opts.TargetWorkers <= 0 {
		opts.TargetWorkers = 1
	}
	if opts.RunWorkers <= 0 {
		opts.RunWorkers = 1
	}
	env, err := expr.NewEnv()
	if err != nil {
		return nil, err
	}
	mc, err := metadata.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	e := &Engine{
		opts:      opts,
		client:    mgr.GetClient(),
		reader:    mgr.GetAPIReader(),
		registry:  policy.NewRegistry(),
		policies:  map[string]*queueRef[reconcile.Request]{policy.KindNamespaced: {}, policy.KindCluster: {}},
		lookups:   newInterest(),
		written:   newWrittenVersions(),
		matchErrs: newMatchErrors(),
		metrics:   newMetrics(),
	}
	e.events = newEventSink(mgr.GetEventRecorder("teardown-operator"), e.namespaceTerminating)
	lister := &Lister{reader: mgr.GetAPIReader(), mapper: mgr.GetRESTMapper()}
	deps := Deps{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Lister: lister,
		Wake:   func(run types.NamespacedName) { e.runs.Add(reconcile.Request{NamespacedName: run}) },
		Config: mgr.GetConfig(), NamespaceTerminating: e.namespaceTerminating}
	for _, f := range kinds {
		e.kinds = append(e.kinds, f(deps))
	}
	e.compiler = policy.NewCompiler(env, e.kinds, lister.Namespaced)
	e.watches = watch.NewManager(mc, mgr.GetRESTMapper(), e.route, opts.Resync, ctrl.Log.WithName("watch"))
	if err := mgr.Add(e.watches); err != nil {
		return nil, err
	}
	if err := e.indexRuns(ctx, mgr); err != nil {
		return nil, err
	}
	if err := e.setupControllers(mgr); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Engine) indexRuns(ctx context.Context, mgr manager.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1alpha1.TeardownRun{}, indexTargetUID, func(o client.Object) []string {
		return []string{string(o.(*v1alpha1.TeardownRun).Spec.Target.UID)}
	}); err != nil {
		return err
	}
	return idx.IndexField(ctx, &v1alpha1.TeardownRun{}, indexPolicy, func(o client.Object) []string {
		ref := o.(*v1alpha1.TeardownRun).Spec.PolicyRef
		return []string{policy.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}.String()}
	})
}

func (e *Engine) setupControllers(mgr manager.Manager) error {
	// Policies.
	for kind, obj := range map[string]client.Object{policy.KindNamespaced: &v1alpha1.TeardownPolicy{}, policy.KindCluster: &v1alpha1.ClusterTeardownPolicy{}} {
		r := &policyReconciler{Engine: e, kind: kind}
		err := builder.ControllerManagedBy(mgr).
			Named(kind).
			For(obj).
			Watches(&v1alpha1.TeardownRun{}, e.recountOnRuns(kind)).
			WatchesRawSource(e.policies[kind].source()).
			WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
			Complete(r)
		if err != nil {
			return fmt.Errorf("%s controller: %w", kind, err)
		}
	}
	// Namespaces: label changes move objects in and out of cluster policies' namespace selectors,
	// and a namespace's deletion changes where runs go and when its policies may let go.
	nsMeta := metaRef(namespaceGVK, "", "")
	err := builder.ControllerManagedBy(mgr).
		Named("namespace").
		WatchesMetadata(nsMeta, &handler.Funcs{
			CreateFunc: func(ctx context.Context, ev eventCreate, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				e.namespaceChanged(ev.Object.GetName())
			},
			UpdateFunc: func(ctx context.Context, ev eventUpdate, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				if !equalStrings(ev.ObjectOld.GetLabels(), ev.ObjectNew.GetLabels()) || ev.ObjectOld.GetDeletionTimestamp() == nil && ev.ObjectNew.GetDeletionTimestamp() != nil {
					e.namespaceChanged(ev.ObjectNew.GetName())
				}
			},
		}).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
	if err != nil {
		return fmt.Errorf("namespace watch: %w", err)
	}
	// Targets.
	tc, err := controller.NewTyped[TargetKey]("target", mgr, controller.TypedOptions[TargetKey]{
		Reconciler:              &targetReconciler{Engine: e},
		MaxConcurrentReconciles: e.opts.TargetWorkers,
	})
	if err != nil {
		return fmt.Errorf("target controller: %w", err)
	}
	if err := tc.Watch(e.targets.source()); err != nil {
		return err
	}
	// Runs.
	runs := builder.ControllerManagedBy(mgr).
		Named("teardownrun")
	// Objects steps create for runs (Jobs): a change executes their run at once.
	for _, k := range e.kinds {
		if o, ok := k.(steps.Owner); ok {
			for _, obj := range o.Owns() {
				runs = runs.Watches(obj, handler.EnqueueRequestsFromMapFunc(runOfOwned))
			}
		}
	}
	return runs.
		// A run's own status writes must not wake it: its next check time is in the status and
		// it is requeued for it. Creation, deletion, finalizer changes and a retry request do.
		For(&v1alpha1.TeardownRun{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.Funcs{UpdateFunc: func(ev event.UpdateEvent) bool {
				o, n := ev.ObjectOld, ev.ObjectNew
				return (o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) || !slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
					n.GetAnnotations()[AnnotationRetry] != "" && o.GetAnnotations()[AnnotationRetry] != n.GetAnnotations()[AnnotationRetry]
			}},
		))).
		WatchesRawSource(e.runs.source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: e.opts.RunWorkers}).
		Complete(&runReconciler{Engine: e})
}

// runOfOwned maps an object a step created to the run its labels name.
func runOfOwned(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[steps.LabelRun] == "" || l[steps.LabelRunNamespace] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[steps.LabelRunNamespace], Name: l[steps.LabelRun]}}}
}

// route receives every event of the dynamic informers and queues the work it implies.
func (e *Engine) route(ev watch.Event) {
	o := ev.Object
	tkey := TargetKey{GVK: ev.GVK, Namespace: o.Namespace, Name: o.Name}
	if !ev.Deleted && e.registry.UsesGVK(ev.GVK) {
		e.targets.Add(tkey)
	}
	e.recountOnFinalizers(ev)
	if ev.Deleted {
		for _, pkey := range e.matchErrs.forgetObject(tkey) {
			e.recountPolicy(pkey)
		}
	}
	if runsCare(ev) {
		for _, r := range e.runsOfTarget(context.Background(), o.UID) {
			if r.Status.Phase.Finished() && r.Status.Phase.Releases(r.Spec.Pipeline.FailurePolicy) {
				continue
			}
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: r.Namespace, Name: r.Name}}
			if ev.Deleted {
				// Usually the run's own release made the target go, and the run cache has not
				// seen the run finish yet: look a little later rather than at a stale copy.
				e.runs.AddAfter(req, vanishedDelay)
			} else {
				e.runs.Add(req)
			}
		}
	}
	for _, r := range e.lookups.interested(ev.GVK, o.Namespace) {
		// Folded: a busy kind wakes each waiting run at most once per lookupDebounce.
		e.runs.AddAfter(r, lookupDebounce)
	}
}

// lookupDebounce folds the changes to looked-up objects into at most one check per run per second.
const lookupDebounce = time.Second

// vanishedDelay is how long after a target is gone its unfinished runs look at it.
const vanishedDelay = 2 * time.Second

// runsCare reports whether a change to a target concerns its runs: its deletion starting, the
// break-glass annotation, or the object going. Other changes (notably the release of another
// finalizer) would only wake runs to read a cache that has not caught up yet.
func runsCare(ev watch.Event) bool {
	o, old := ev.Object, ev.Old
	switch {
	case ev.Deleted:
		return true
	case o.DeletionTimestamp == nil:
		return false
	case old == nil || old.DeletionTimestamp == nil:
		return true
	}
	return o.Annotations[AnnotationAbandon] != old.Annotations[AnnotationAbandon]
}

// namespaceChanged re-examines what a namespace's labels or deletion affect.
func (e *Engine) namespaceChanged(ns string) {
	seen := map[schema.GroupVersionKind]bool{}
	for _, gvk := range e.registry.GVKs() {
		for _, p := range e.registry.ForGVK(gvk) {
			if p.Key.Namespaced() && p.Key.Namespace == ns {
				e.policies[policy.KindNamespaced].Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: p.Key.Name}})
			}
			if (p.NamespaceSelector != nil || p.Key.Namespaced() && p.Key.Namespace == ns) && !seen[gvk] {
				seen[gvk] = true
				e.enqueueTargets(gvk, ns)
			}
		}
	}
}

// enqueueTargets queues every cached object of gvk in namespace (empty: all).
func (e *Engine) enqueueTargets(gvk schema.GroupVersionKind, namespace string) {
	for _, o := range e.watches.List(gvk, namespace) {
		e.targets.Add(TargetKey{GVK: gvk, Namespace: o.Namespace, Name: o.Name})
	}
}

// runsOfTarget returns the cached runs of a target.
func (e *Engine) runsOfTarget(ctx context.Context, uid types.UID) []v1alpha1.TeardownRun {
	var list v1alpha1.TeardownRunList
	if err := e.client.List(ctx, &list, client.MatchingFields{indexTargetUID: string(uid)}); err != nil {
		return nil
	}
	return list.Items
}

// runsOfPolicy returns the cached runs of a policy.
func (e *Engine) runsOfPolicy(ctx context.Context, key policy.Key) ([]v1alpha1.TeardownRun, error) {
	var list v1alpha1.TeardownRunList
	if err := e.client.List(ctx, &list, client.MatchingFields{indexPolicy: key.String()}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// namespaceTerminating reports whether a namespace is being deleted, from the cache.
func (e *Engine) namespaceTerminating(ctx context.Context, ns string) bool {
	if ns == "" {
		return false
	}
	m, err := e.namespace(ctx, ns)
	return err == nil && m.DeletionTimestamp != nil
}

func (e *Engine) namespace(ctx context.Context, ns string) (*metav1.PartialObjectMetadata, error) {
	m := metaRef(namespaceGVK, "", ns)
	err := e.client.Get(ctx, client.ObjectKey{Name: ns}, m)
	return m, err
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

// queueRef hands a controller's queue to code outside the controller (informer handlers, other
// reconcilers). Items added before the controller starts are kept and queued when it does.
type queueRef[T comparable] struct {
	mu      sync.Mutex
	q       workqueue.TypedRateLimitingInterface[T]
	pending []T
}

func (r *queueRef[T]) source() source.TypedSource[T] {
	return source.TypedFunc[T](func(_ context.Context, q workqueue.TypedRateLimitingInterface[T]) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.q = q
		for _, item := range r.pending {
			q.Add(item)
		}
		r.pending = nil
		return nil
	})
}

// Add queues item now.
func (r *queueRef[T]) Add(item T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.q == nil {
		r.pending = append(r.pending, item)
		return
	}
	r.q.Add(item)
}

// AddAfter queues item after d; the queue folds repeated adds of the same item.
func (r *queueRef[T]) AddAfter(item T, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.q == nil {
		r.pending = append(r.pending, item)
		return
	}
	r.q.AddAfter(item, d)
}

// interest records which runs wait on changes to which kinds of objects (wait-step lookups).
type interest struct {
	mu    sync.Mutex
	byGVK map[schema.GroupVersionKind]map[string]map[reconcile.Request]struct{} // gvk -> namespace -> runs
	byRun map[reconcile.Request][]steps.WatchTarget
}

func newInterest() *interest {
	return &interest{byGVK: map[schema.GroupVersionKind]map[string]map[reconcile.Request]struct{}{}, byRun: map[reconcile.Request][]steps.WatchTarget{}}
}

// set replaces what run waits on and returns the kinds it no longer waits on.
func (in *interest) set(run reconcile.Request, targets []steps.WatchTarget) (dropped []schema.GroupVersionKind) {
	in.mu.Lock()
	defer in.mu.Unlock()
	keep := map[schema.GroupVersionKind]bool{}
	for _, t := range targets {
		keep[t.GVK] = true
	}
	for _, old := range in.byRun[run] {
		if nss := in.byGVK[old.GVK]; nss != nil {
			delete(nss[old.Namespace], run)
			if len(nss[old.Namespace]) == 0 {
				delete(nss, old.Namespace)
			}
			if len(nss) == 0 {
				delete(in.byGVK, old.GVK)
			}
		}
		if !keep[old.GVK] {
			dropped = append(dropped, old.GVK)
		}
	}
	if len(targets) == 0 {
		delete(in.byRun, run)
		return dropped
	}
	in.byRun[run] = targets
	for _, t := range targets {
		nss := in.byGVK[t.GVK]
		if nss == nil {
			nss = map[string]map[reconcile.Request]struct{}{}
			in.byGVK[t.GVK] = nss
		}
		if nss[t.Namespace] == nil {
			nss[t.Namespace] = map[reconcile.Request]struct{}{}
		}
		nss[t.Namespace][run] = struct{}{}
	}
	return dropped
}

// interested returns the runs waiting on changes to gvk objects in namespace.
func (in *interest) interested(gvk schema.GroupVersionKind, namespace string) []reconcile.Request {
	in.mu.Lock()
	defer in.mu.Unlock()
	nss := in.byGVK[gvk]
	if nss == nil {
		return nil
	}
	var out []reconcile.Request
	for r := range nss[namespace] {
		out = append(out, r)
	}
	if namespace != "" {
		for r := range nss[""] {
			out = append(out, r)
		}
	}
	return out
}
