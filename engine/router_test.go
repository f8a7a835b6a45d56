package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/ownwrites"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
	"github.com/teardown-dev/teardown-operator/steps"
)

// recorded is a queue that records what a handler put in it, and after how long.
type recorded[T comparable] struct {
	items []T
	after []time.Duration
}

func (q *recorded[T]) Add(item T) { q.AddAfter(item, 0) }
func (q *recorded[T]) AddAfter(item T, d time.Duration) {
	q.items, q.after = append(q.items, item), append(q.after, d)
}

var (
	configMaps = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	secrets    = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	fin        = "teardownpolicy.teardown.dev/p"
)

// object is a version of the ConfigMap shop/orders.
func object(finalizers []string, edit func(*metav1.ObjectMeta)) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "u1", Finalizers: finalizers}}
	if edit != nil {
		edit(&m.ObjectMeta)
	}
	return m
}

func deleting(m *metav1.ObjectMeta) { m.DeletionTimestamp = &metav1.Time{} }

func TestTargetEvents(t *testing.T) {
	key := NewTargetKey(configMaps, "shop", "orders")
	for name, tc := range map[string]struct {
		ev         watch.Event
		expectEcho []string // the finalizers of an arming write in flight
		queued     bool
	}{
		"an object of a kind a policy targets is created": {ev: watch.Event{GVK: configMaps, Object: object(nil, nil)}, queued: true},
		"it changes": {ev: watch.Event{GVK: configMaps, Old: object(nil, nil), Object: object(nil, func(m *metav1.ObjectMeta) { m.Labels = map[string]string{"a": "b"} })}, queued: true},
		"the echo of the engine's arming write is not reconciled": {ev: watch.Event{GVK: configMaps, Old: object(nil, nil), Object: object([]string{fin}, nil)}, expectEcho: []string{fin}, queued: false},
		"another change while an arming write is in flight":       {ev: watch.Event{GVK: configMaps, Old: object(nil, nil), Object: object([]string{fin}, deleting)}, expectEcho: []string{fin}, queued: true},
		"a kind no policy targets (a looked-up kind)":             {ev: watch.Event{GVK: secrets, Object: object(nil, nil)}, queued: false},
		"an object gone: nothing to reconcile":                    {ev: watch.Event{GVK: configMaps, Object: object(nil, nil), Deleted: true}, queued: false},
	} {
		t.Run(name, func(t *testing.T) {
			reg := policy.NewRegistry()
			reg.Set(&policy.Compiled{Key: policy.Key{Kind: policy.KindNamespaced, Namespace: "shop", Name: "p"}, GVK: configMaps, Finalizer: fin})
			q := &recorded[TargetKey]{}
			h := targetEvents{registry: reg, echoes: ownwrites.NewEchoes[TargetKey](), targets: q}
			if tc.expectEcho != nil {
				h.echoes.Expect(key, tc.expectEcho)
			}
			h.handle(tc.ev)
			if got := len(q.items) == 1 && q.items[0] == key && q.after[0] == 0; got != tc.queued || len(q.items) > 1 {
				t.Errorf("queued %v, want %v", q.items, tc.queued)
			}
			if h.echoes.Echo(key, object(nil, nil), object([]string{fin}, nil)) {
				t.Error("the arming write is still expected after an event")
			}
		})
	}
}

func TestCountEvents(t *testing.T) {
	pkey := policy.Key{Kind: policy.KindNamespaced, Namespace: "shop", Name: "p"}
	for name, tc := range map[string]struct {
		ev         watch.Event
		matchError bool
		recount    bool
	}{
		"its finalizer added":                        {ev: watch.Event{GVK: configMaps, Old: object(nil, nil), Object: object([]string{fin}, nil)}, recount: true},
		"its finalizer removed":                      {ev: watch.Event{GVK: configMaps, Old: object([]string{fin}, nil), Object: object(nil, nil)}, recount: true},
		"gone with its finalizer":                    {ev: watch.Event{GVK: configMaps, Object: object([]string{fin}, nil), Deleted: true}, recount: true},
		"another controller's finalizer":             {ev: watch.Event{GVK: configMaps, Old: object(nil, nil), Object: object([]string{"example.com/x"}, nil)}},
		"a change that moves no count":               {ev: watch.Event{GVK: configMaps, Old: object([]string{fin}, nil), Object: object([]string{fin}, deleting)}},
		"gone while its match failed":                {ev: watch.Event{GVK: configMaps, Object: object(nil, nil), Deleted: true}, matchError: true, recount: true},
		"a match failing on an object that still is": {ev: watch.Event{GVK: configMaps, Old: object(nil, nil), Object: object(nil, deleting)}, matchError: true},
	} {
		t.Run(name, func(t *testing.T) {
			reg := policy.NewRegistry()
			reg.Set(&policy.Compiled{Key: pkey, GVK: configMaps, Finalizer: fin})
			w := newWakeups(reg)
			m := newPolicyObjects()
			if tc.matchError {
				m.set(pkey, NewTargetKey(configMaps, "shop", "orders"), true)
			}
			countEvents{wake: w, matchErrs: m}.handle(tc.ev)
			want := []reconcile.Request(nil)
			if tc.recount {
				want = []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "shop", Name: "p"}}}
			}
			if got := slices.Compact(w.policies[policy.KindNamespaced].pending); !slices.Equal(got, want) {
				t.Errorf("recounts %v, want %v", got, want)
			}
		})
	}
}

func TestRunEvents(t *testing.T) {
	run := func(name string, phase v1alpha1.RunPhase) v1alpha1.TeardownRun {
		return v1alpha1.TeardownRun{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Status: v1alpha1.TeardownRunStatus{Phase: phase}}
	}
	runs := []v1alpha1.TeardownRun{run("going", v1alpha1.RunRunning), run("done", v1alpha1.RunSucceeded), run("kept", v1alpha1.RunFailed)}
	req := func(name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: name}}
	}
	abandon := func(m *metav1.ObjectMeta) { m.Annotations = map[string]string{v1alpha1.AnnotationAbandon: "alice"} }
	key := NewTargetKey(configMaps, "shop", "orders")
	for name, tc := range map[string]struct {
		ev    watch.Event
		woken []reconcile.Request
		after time.Duration
		// stillReleased: a run's release of fin is still remembered (the cache does not show it).
		stillReleased bool
	}{
		"its deletion starts: the runs not done are woken": {ev: watch.Event{GVK: configMaps, Old: object(nil, nil), Object: object(nil, deleting)}, woken: []reconcile.Request{req("going"), req("kept")}},
		"the cache does not show the release yet":          {ev: watch.Event{GVK: configMaps, Old: object([]string{fin, "b"}, deleting), Object: object([]string{fin}, deleting)}, stillReleased: true},
		"break glass":                {ev: watch.Event{GVK: configMaps, Old: object(nil, deleting), Object: object(nil, func(m *metav1.ObjectMeta) { deleting(m); abandon(m) })}, woken: []reconcile.Request{req("going"), req("kept")}},
		"gone: woken a little later": {ev: watch.Event{GVK: configMaps, Object: object(nil, deleting), Deleted: true}, woken: []reconcile.Request{req("going"), req("kept")}, after: vanishedDelay},
		"another finalizer released": {ev: watch.Event{GVK: configMaps, Old: object([]string{"a", "b"}, deleting), Object: object([]string{"b"}, deleting)}},
		"a label changed":            {ev: watch.Event{GVK: configMaps, Old: object(nil, nil), Object: object(nil, func(m *metav1.ObjectMeta) { m.Labels = map[string]string{"a": "b"} })}},
	} {
		t.Run(name, func(t *testing.T) {
			q := &recorded[reconcile.Request]{}
			released := ownwrites.NewReleases[TargetKey]()
			released.Add(key, "u1", fin)
			runEvents{runsOf: func(context.Context, types.UID) []v1alpha1.TeardownRun { return runs }, released: released, runs: q}.handle(tc.ev)
			if !slices.Equal(q.items, tc.woken) {
				t.Errorf("woke %v, want %v", q.items, tc.woken)
			}
			if got := released.Holds(key, "u1", fin); got != tc.stillReleased {
				t.Errorf("the release of %s still remembered: %v, want %v", fin, got, tc.stillReleased)
			}
			for _, d := range q.after {
				if d != tc.after {
					t.Errorf("woken after %s, want %s", d, tc.after)
				}
			}
		})
	}
}

func TestGuardAndLookupEvents(t *testing.T) {
	guarded := NewTargetKey(configMaps, "shop", "network")
	waiting := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: "run-1"}}
	guards, lookups := newInterest[TargetKey](), newInterest[reconcile.Request]()
	guards.set(guarded, []steps.WatchTarget{{GVK: secrets, Namespace: "shop"}})
	lookups.set(waiting, []steps.WatchTarget{{GVK: secrets, Namespace: ""}})
	watches := watch.NewManager(nil, nil, nil, 0, logr.Discard())
	targets, runs := &recorded[TargetKey]{}, &recorded[reconcile.Request]{}
	g, l := guardEvents{guards: guards, watches: watches, targets: targets}, lookupEvents{lookups: lookups, runs: runs}

	secret := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "token"}}
	for _, h := range []watchHandler{g, l} {
		h.handle(watch.Event{GVK: secrets, Object: secret})
	}
	if !slices.Equal(targets.items, []TargetKey{guarded}) || targets.after[0] != guardDebounce {
		t.Errorf("a looked-up Secret changed: guards woken %v after %v, want %v after %s", targets.items, targets.after, guarded, guardDebounce)
	}
	if !slices.Equal(runs.items, []reconcile.Request{waiting}) || runs.after[0] != lookupDebounce {
		t.Errorf("a looked-up Secret changed: runs woken %v after %v, want %v after %s", runs.items, runs.after, waiting, lookupDebounce)
	}
	other := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "billing", Name: "token"}}
	g.handle(watch.Event{GVK: secrets, Object: other})
	if len(targets.items) != 1 {
		t.Error("a Secret of another namespace woke a guard that looks up its own")
	}
	g.handle(watch.Event{GVK: configMaps, Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "network"}}, Deleted: true})
	if guards.interested(secrets, "shop") != nil {
		t.Error("a protected object gone still has its guard's lookups watched")
	}
}
