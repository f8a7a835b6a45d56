package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// recountDelay folds the changes that move a policy's counts (objects armed, released or gone,
// runs starting and ending) into at most one recount per policy per second, however many
// objects change at once.
const recountDelay = time.Second

// countEvents is the policy counts' handler: it queues the recount of every policy whose counts a
// target event moves: a teardown finalizer added, removed or taken away with the object, whoever
// made the change, and an object whose match was failing gone.
type countEvents struct {
	wake      *wakeups
	matchErrs *policyObjects
	rejects   *policyObjects
}

func (h countEvents) handle(ev watch.Event) {
	var before, after []string
	if ev.Old != nil {
		before = ev.Old.Finalizers
	}
	if !ev.Deleted {
		after = ev.Object.Finalizers
	} else {
		before = ev.Object.Finalizers
	}
	for _, f := range symmetricDiff(before, after) {
		if naming.IsOurs(f) {
			h.wake.recount(f, ev.Object.Namespace)
		}
	}
	if ev.Deleted {
		key := NewTargetKey(ev.GVK, ev.Object.Namespace, ev.Object.Name)
		for _, pkey := range h.matchErrs.forgetObject(key) {
			h.wake.recountPolicy(pkey)
		}
		if h.rejects != nil {
			h.rejects.forgetObject(key)
		}
		return
	}
	if ev.Old == nil && !slices.ContainsFunc(ev.Object.Finalizers, naming.IsOurs) {
		// A new object that no admission policy armed: teardown_unarmed_objects counts it
		// until the operator has looked at it.
		h.wake.recountSelecting(ev.GVK, ev.Object.Namespace, ev.Object.Labels)
	}
}

// recountOnRuns is the handler that queues a policy's recount when one of its runs (of policy
// kind kind) is created, changes phase, starts being deleted or goes.
func (e *Engine) recountOnRuns(kind string) handler.TypedEventHandler[client.Object, reconcile.Request] {
	enqueue := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		run, ok := o.(*v1alpha1.TeardownRun)
		if !ok || run.Spec.PolicyRef.Kind != kind {
			return
		}
		ref := run.Spec.PolicyRef
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}}, recountDelay)
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, ev event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ev.Object, q)
		},
		UpdateFunc: func(_ context.Context, ev event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			o, n := ev.ObjectOld.(*v1alpha1.TeardownRun), ev.ObjectNew.(*v1alpha1.TeardownRun)
			if o.Status.Phase != n.Status.Phase || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) {
				enqueue(n, q)
			}
		},
		DeleteFunc: func(_ context.Context, ev event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ev.Object, q)
		},
	}
}

// runCounts are a policy's runs as its status and gauges count them.
type runCounts struct {
	active, stuck int
	// nextStuck is how long until the next run crosses the stuck threshold; 0 if none will.
	nextStuck time.Duration
}

// countRuns counts the active and stuck runs among runs at now. A run is stuck once it has been
// in flight, or failed and kept its object, for longer than stuckAfter.
func countRuns(runs []v1alpha1.TeardownRun, now time.Time, stuckAfter time.Duration) runCounts {
	var c runCounts
	for i := range runs {
		run := &runs[i]
		phase := run.Status.Phase
		if !phase.Finished() {
			c.active++
		}
		if releasesObject(run) {
			continue
		}
		crossing := run.CreationTimestamp.Add(stuckAfter)
		if now.After(crossing) {
			c.stuck++
			continue
		}
		// Come back just past the crossing: nothing else may happen to this run until then.
		if wait := crossing.Sub(now) + stuckMargin; c.nextStuck == 0 || wait < c.nextStuck {
			c.nextStuck = wait
		}
	}
	return c
}

// stuckMargin puts the recount just past a run's stuck crossing rather than on it.
const stuckMargin = 100 * time.Millisecond

// matchReports is how the target side reports to the policies' status the objects whose match
// fails to evaluate: it records them and has the policy recounted.
type matchReports struct {
	errs *policyObjects
	// rejects are the objects whose labels a policy selects and whose match is false.
	rejects *policyObjects
	wake    *wakeups
}

// set records whether obj's match failed for pkey; it reports whether that changed.
func (m matchReports) set(pkey policy.Key, obj TargetKey, failed bool) bool {
	return m.errs.set(pkey, obj, failed)
}

// recordRejects records, for the policies with a match, whether theirs rejected the object.
func (m matchReports) recordRejects(obj TargetKey, policies []*policy.Compiled, rejected map[policy.Key]bool) {
	for _, p := range policies {
		if p.Match != nil && m.rejects != nil {
			m.rejects.set(p.Key, obj, rejected[p.Key])
		}
	}
}

// recount queues a status recount of the policy.
func (m matchReports) recount(pkey policy.Key) { m.wake.recountPolicy(pkey) }

// policyObjects records a set of objects per policy: those whose match failed to evaluate the
// last time they were looked at (status.matchErrors), and those whose match was false
// (left out of teardown_unarmed_objects). It is safe for concurrent use.
type policyObjects struct {
	mu       sync.Mutex
	byPolicy map[policy.Key]map[TargetKey]bool
}

func newPolicyObjects() *policyObjects {
	return &policyObjects{byPolicy: map[policy.Key]map[TargetKey]bool{}}
}

// set records whether obj is in pkey's set; it reports whether that changed.
func (m *policyObjects) set(pkey policy.Key, obj TargetKey, in bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	objs := m.byPolicy[pkey]
	if objs[obj] == in {
		return false
	}
	if in {
		if objs == nil {
			objs = map[TargetKey]bool{}
			m.byPolicy[pkey] = objs
		}
		objs[obj] = true
		return true
	}
	delete(objs, obj)
	if len(objs) == 0 {
		delete(m.byPolicy, pkey)
	}
	return true
}

// forgetObject drops an object that is gone and returns the policies whose count changed.
func (m *policyObjects) forgetObject(obj TargetKey) []policy.Key {
	m.mu.Lock()
	defer m.mu.Unlock()
	var changed []policy.Key
	for pkey, objs := range m.byPolicy {
		if objs[obj] {
			delete(objs, obj)
			changed = append(changed, pkey)
			if len(objs) == 0 {
				delete(m.byPolicy, pkey)
			}
		}
	}
	slices.SortFunc(changed, func(a, b policy.Key) int { return strings.Compare(a.String(), b.String()) })
	return changed
}

// forgetPolicy drops a policy that is gone.
func (m *policyObjects) forgetPolicy(pkey policy.Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byPolicy, pkey)
}

// has reports whether obj is in pkey's set.
func (m *policyObjects) has(pkey policy.Key, obj TargetKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byPolicy[pkey][obj]
}

// count returns how many objects are in pkey's set.
func (m *policyObjects) count(pkey policy.Key) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byPolicy[pkey])
}

func symmetricDiff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			out = append(out, x)
		}
	}
	return out
}
