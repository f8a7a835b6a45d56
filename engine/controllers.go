package engine

import (
	"context"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/ownwrites"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/fairqueue"
	"github.com/teardown-dev/teardown-operator/internal/lookup"
	"github.com/teardown-dev/teardown-operator/steps"
)

// policyWorkers is how many policies are reconciled at once per kind: policies are few and their
// reconciles short (compile once per generation, recount).
const policyWorkers = 2

// setupControllers registers the policy, namespace, target and run controllers with mgr.
func (e *Engine) setupControllers(mgr manager.Manager) error {
	// One run reconciler: the target controller starts runs and asks after them through it (runSide).
	e.runs = &runReconciler{client: e.client, reader: e.reader, policies: compiledPolicies{e.registry, e.compiler},
		watches: e.watches, events: e.events, reports: passReports{metrics: e.metrics, history: e.history}, written: e.written,
		released: e.released, lookups: e.lookups, kinds: e.kinds, runNamespace: e.opts.RunNamespace, retention: e.opts.RunRetention,
		stuckAfter: e.opts.StuckAfter, fin: e.fin, requeue: &e.wake.runs, reads: e.reads, lead: e.lead}
	for _, setup := range []func(manager.Manager) error{e.setupPolicies, e.setupNamespaces, e.setupTargets, e.setupRuns} {
		if err := setup(mgr); err != nil {
			return err
		}
	}
	return nil
}

// setupPolicies watches both kinds of policy, and their runs for the counts in their status.
func (e *Engine) setupPolicies(mgr manager.Manager) error {
	dryRuns := newDryRuns(e.opts.RunNamespace)
	counter := &policyCounter{watches: e.watches, reader: e.reader, reads: e.reads, matchErrs: e.matchErrs, rejects: e.matchRejects, metrics: e.metrics, history: e.history, stuckAfter: e.opts.StuckAfter}
	for kind, obj := range map[string]client.Object{policy.KindNamespaced: &v1alpha1.TeardownPolicy{}, policy.KindCluster: &v1alpha1.ClusterTeardownPolicy{}} {
		r := &policyReconciler{kind: kind, client: e.client, reader: e.reader, registry: e.registry, compiler: e.compiler,
			watches: e.watches, counter: counter, fin: e.fin, reads: e.reads, wake: e.wake, served: e.served, statusWritten: ownwrites.NewVersions[types.NamespacedName](),
			dryRuns: dryRuns, arming: e.arming}
		b := builder.ControllerManagedBy(mgr)
		if e.arming.active() {
			// Its own admission objects (the cache holds no others): one changed by someone else
			// is put back, one whose policy is gone removed.
			b = b.Watches(&admissionv1.MutatingAdmissionPolicy{}, handler.EnqueueRequestsFromMapFunc(policyOfAdmission(kind))).
				Watches(&admissionv1.MutatingAdmissionPolicyBinding{}, handler.EnqueueRequestsFromMapFunc(policyOfAdmission(kind)))
		}
		err := b.
			Named(kind).
			// The policy's own status writes must not wake it: each would recount and write again
			// while a teardown changes the counts. Recounts come from the changes themselves,
			// folded to one a second (see recount).
			For(obj, builder.WithPredicates(specOrLifecycleChanged)).
			Watches(&v1alpha1.TeardownRun{}, e.recountOnRuns(kind)).
			// Whole objects, from the cache readAdmission reads: the change that wakes a policy
			// is then the one it reads.
			Watches(&admissionv1.ValidatingAdmissionPolicy{}, handler.EnqueueRequestsFromMapFunc(e.policiesThatVeto(kind))).
			Watches(&admissionv1.ValidatingAdmissionPolicyBinding{}, handler.EnqueueRequestsFromMapFunc(e.policiesThatVeto(kind))).
			WatchesRawSource(e.wake.policies[kind].source()).
			WithOptions(controller.Options{MaxConcurrentReconciles: policyWorkers}).
			Complete(requeueConflicts[reconcile.Request](r))
		if err != nil {
			return fmt.Errorf("%s controller: %w", kind, err)
		}
	}
	e.router.register(countEvents{wake: e.wake, matchErrs: e.matchErrs, rejects: e.matchRejects})
	return nil
}

// specOrLifecycleChanged passes creations, deletions, and updates of an object's spec (its
// generation), deletion timestamp or finalizers: not its status.
var specOrLifecycleChanged = predicate.Or(
	predicate.GenerationChangedPredicate{},
	predicate.Funcs{UpdateFunc: func(ev event.UpdateEvent) bool {
		o, n := ev.ObjectOld, ev.ObjectNew
		return (o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) || !slices.Equal(o.GetFinalizers(), n.GetFinalizers())
	}},
)

// setupNamespaces watches namespaces: label changes move objects in and out of cluster policies'
// namespace selectors, and a namespace's deletion changes where runs go and when its policies
// may let go.
func (e *Engine) setupNamespaces(mgr manager.Manager) error {
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
	return nil
}

// setupTargets runs the target controller; the dynamic watches feed its queue (targetEvents, and
// guardEvents for what deletion guards look up).
func (e *Engine) setupTargets(mgr manager.Manager) error {
	tc, err := controller.NewTyped[TargetKey]("target", mgr, controller.TypedOptions[TargetKey]{
		Reconciler: requeueConflicts[TargetKey](&targetReconciler{reader: e.reader, registry: e.registry,
			watches: e.watches, events: e.events, reads: e.reads, runs: e.runs,
			arming:  armer{fin: e.fin, echoes: e.echoes, late: e.metrics.armedLate},
			guard:   &deletionGuards{lister: lookup.NewAPILister(e.reader, mgr.GetRESTMapper()), interest: e.guards, watches: e.watches, client: e.client},
			matches: matchReports{errs: e.matchErrs, rejects: e.matchRejects, wake: e.wake}}),
		MaxConcurrentReconciles: e.opts.TargetWorkers,
		NewQueue:                fairQueue(func(k TargetKey) string { return k.Namespace }),
	})
	if err != nil {
		return fmt.Errorf("target controller: %w", err)
	}
	e.router.register(
		targetEvents{registry: e.registry, echoes: e.echoes, targets: &e.wake.targets},
		guardEvents{guards: e.guards, watches: e.watches, targets: &e.wake.targets})
	return tc.Watch(e.wake.targets.source())
}

// setupRuns runs the run controller, woken by the objects steps create for runs (Jobs) too, by
// changes of their targets (runEvents) and by the kinds their wait steps look up (lookupEvents).
func (e *Engine) setupRuns(mgr manager.Manager) error {
	e.router.register(runEvents{runsOf: e.reads.runsOfTarget, released: e.released, runs: &e.wake.runs}, lookupEvents{lookups: e.lookups, runs: &e.wake.runs})
	runs := builder.ControllerManagedBy(mgr).
		Named("teardownrun")
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
		// (Its spec never changes, so its generation says nothing here.)
		For(&v1alpha1.TeardownRun{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: func(ev event.UpdateEvent) bool {
			o, n := ev.ObjectOld, ev.ObjectNew
			return (o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) || !slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
				n.GetAnnotations()[v1alpha1.AnnotationRetry] != "" && o.GetAnnotations()[v1alpha1.AnnotationRetry] != n.GetAnnotations()[v1alpha1.AnnotationRetry]
		}})).
		// The cache has let a run go: what the engine remembers of its writes can go too.
		Watches(&v1alpha1.TeardownRun{}, handler.Funcs{DeleteFunc: e.runs.forgetRun}).
		WatchesRawSource(e.wake.runs.source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: e.opts.RunWorkers,
			NewQueue: fairQueue(func(r reconcile.Request) string { return r.Namespace })}).
		Complete(requeueConflicts[reconcile.Request](e.runs))
}

// fairQueue makes a controller's queue share its workers between namespaces (internal/fairqueue):
// one tenant deleting thousands of objects, or a policy feeding itself, must not hold up every
// other tenant's teardowns. Runs are shared by the namespace they live in, so the runs of
// ClusterTeardownPolicies kept in the run namespace share one turn.
func fairQueue[T comparable](namespaceOf func(T) string) func(string, workqueue.TypedRateLimiter[T]) workqueue.TypedRateLimitingInterface[T] {
	return func(name string, rateLimiter workqueue.TypedRateLimiter[T]) workqueue.TypedRateLimitingInterface[T] {
		return fairqueue.New(name, rateLimiter, namespaceOf)
	}
}
