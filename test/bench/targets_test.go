package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

func TestResolve(t *testing.T) {
	base := options{n: 1000, namespaces: 1, rounds: 1, step: stepWait}
	with := func(f func(*options)) options { o := base; f(&o); return o }
	for _, tc := range []struct {
		name    string
		o       options
		deletes int
		timeout time.Duration
		err     bool
	}{
		{name: "defaults", o: base, deletes: 1000, timeout: 10 * time.Minute},
		{name: "scale", o: with(func(o *options) { o.n, o.namespaces, o.deletes = 100000, 100, 10000 }), deletes: 10000, timeout: 50 * time.Minute},
		{name: "timeout set", o: with(func(o *options) { o.n, o.timeout = 100000, time.Hour }), deletes: 100000, timeout: time.Hour},
		{name: "no namespace", o: with(func(o *options) { o.namespaces = 0 }), err: true},
		{name: "more namespaces than targets", o: with(func(o *options) { o.namespaces = 1001 }), err: true},
		{name: "more deletes than targets", o: with(func(o *options) { o.deletes = 1001 }), err: true},
		{name: "namespace deletion over several", o: with(func(o *options) { o.namespace, o.namespaces = true, 4 }), err: true},
		{name: "namespace deletion of some", o: with(func(o *options) { o.namespace, o.deletes = true, 10 }), err: true},
		{name: "no round", o: with(func(o *options) { o.rounds = 0 }), err: true},
		{name: "resource", o: with(func(o *options) { o.step, o.contenders = stepResource, "peer,operator,operator-job" }), deletes: 1000, timeout: 10 * time.Minute},
		{name: "job step without -step resource", o: with(func(o *options) { o.contenders = "peer,operator-job" }), err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			err := o.resolve()
			if tc.err {
				if err == nil {
					t.Fatalf("resolve accepted %+v", tc.o)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.deletes != tc.deletes || o.timeout != tc.timeout {
				t.Errorf("deletes %d, timeout %s; want %d, %s", o.deletes, o.timeout, tc.deletes, tc.timeout)
			}
		})
	}
}

// The first m targets, those a partial teardown deletes, cover every namespace.
func TestKeysSpreadOverNamespaces(t *testing.T) {
	b := &bench{o: options{n: 10, deletes: 4}, namespaces: []string{"a", "b", "c"}}
	want := []string{"a/target-00000", "b/target-00001", "c/target-00002", "a/target-00003"}
	if got := b.keys(); !reflect.DeepEqual(got, want) {
		t.Errorf("keys = %q, want %q", got, want)
	}
}

// Over several namespaces the operator gets one cluster policy with the namespaced one's spec.
func TestOperatorPolicy(t *testing.T) {
	steps := []v1alpha1.Step{framework.WaitStep("noop", 0)}
	one, _ := operatorPolicy([]string{"a"}, steps, v1alpha1.RunHistoryAll)
	np, ok := one.(*v1alpha1.TeardownPolicy)
	if !ok || np.Namespace != "a" {
		t.Fatalf("one namespace: %T in %q, want a TeardownPolicy in a", one, one.GetNamespace())
	}
	several, _ := operatorPolicy([]string{"a", "b"}, steps, v1alpha1.RunHistoryAll)
	cp, ok := several.(*v1alpha1.ClusterTeardownPolicy)
	if !ok {
		t.Fatalf("several namespaces: %T, want a ClusterTeardownPolicy", several)
	}
	if !reflect.DeepEqual(cp.Spec.TeardownPolicySpec, np.Spec) || cp.Spec.NamespaceSelector == nil {
		t.Errorf("cluster policy spec %+v, want %+v and a namespaceSelector", cp.Spec, np.Spec)
	}
}

// Every other round runs the contenders in reverse, and the medians are taken over the rounds.
func TestRounds(t *testing.T) {
	cs := []contender{{name: "peer"}, {name: "operator"}, {name: "operator-all"}}
	names := func(cs []contender) (out []string) {
		for _, c := range cs {
			out = append(out, c.name)
		}
		return out
	}
	if got := names(orderOf(cs, 0)); !reflect.DeepEqual(got, []string{"peer", "operator", "operator-all"}) {
		t.Errorf("round 1 runs %q", got)
	}
	if got := names(orderOf(cs, 1)); !reflect.DeepEqual(got, []string{"operator-all", "operator", "peer"}) {
		t.Errorf("round 2 runs %q", got)
	}
	if names(cs)[0] != "peer" {
		t.Error("orderOf reordered the lineup itself")
	}
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{[]float64{0.9, 1.1, 0.7}, 0.9}, {[]float64{1, 3}, 2}, {nil, 0}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
