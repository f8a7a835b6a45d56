package ownwrites

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEchoes(t *testing.T) {
	key, other := "ns/a", "ns/b"
	fin := "teardownpolicy.teardown.dev/p"
	version := func(finalizers []string, edit func(*metav1.ObjectMeta)) *metav1.PartialObjectMetadata {
		m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: "u1", Labels: map[string]string{"app": "p"}, Finalizers: finalizers}}
		if edit != nil {
			edit(&m.ObjectMeta)
		}
		return m
	}
	bare, armed := version(nil, nil), version([]string{fin}, nil)
	type event struct {
		key      string
		old, cur *metav1.PartialObjectMetadata
		echo     bool
	}
	for _, tc := range []struct {
		name   string
		expect map[string][]string
		events []event
	}{
		{"the write's own event is its echo, once", map[string][]string{key: {fin}},
			[]event{{key, bare, armed, true}, {key, bare, armed, false}}},
		{"nothing written: no echo", nil, []event{{key, bare, armed, false}}},
		{"an add is no echo", map[string][]string{key: {fin}}, []event{{key, nil, armed, false}}},
		{"other finalizers", map[string][]string{key: {fin}},
			[]event{{key, bare, version([]string{fin, "example.com/other"}, nil), false}}},
		{"labels changed too", map[string][]string{key: {fin}},
			[]event{{key, bare, version([]string{fin}, func(m *metav1.ObjectMeta) { m.Labels = map[string]string{"app": "q"} }), false}}},
		{"deleting", map[string][]string{key: {fin}},
			[]event{{key, bare, version([]string{fin}, func(m *metav1.ObjectMeta) { m.DeletionTimestamp = &metav1.Time{} }), false}}},
		{"another event first: the echo came before it or never comes", map[string][]string{key: {fin}},
			[]event{{key, bare, version(nil, func(m *metav1.ObjectMeta) { m.Annotations = map[string]string{"a": "b"} }), false}, {key, bare, armed, false}}},
		{"per object", map[string][]string{key: {fin}}, []event{{other, bare, armed, false}, {key, bare, armed, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewEchoes[string]()
			for k, f := range tc.expect {
				a.Expect(k, f)
			}
			for i, ev := range tc.events {
				if got := a.Echo(ev.key, ev.old, ev.cur); got != ev.echo {
					t.Errorf("event %d: echo %v, want %v", i, got, ev.echo)
				}
			}
			if len(a.m) != 0 {
				t.Errorf("%d writes still remembered", len(a.m))
			}
		})
	}
	a := NewEchoes[string]()
	a.Expect(key, []string{fin})
	a.Cancel(key)
	if a.Echo(key, bare, armed) {
		t.Error("a cancelled write has an echo")
	}

	// Once the write's response has come, only the version it made is its echo: a relist can
	// merge it with a later change of what the cache does not keep (a ConfigMap's data).
	at := func(m *metav1.PartialObjectMetadata, rv string) *metav1.PartialObjectMetadata {
		m = m.DeepCopy()
		m.ResourceVersion = rv
		return m
	}
	a.Expect(key, []string{fin})
	a.Wrote(key, "8")
	if a.Echo(key, at(bare, "7"), at(armed, "9")) {
		t.Error("a later version is taken for the write's echo")
	}
	a.Expect(key, []string{fin})
	a.Wrote(key, "8")
	if !a.Echo(key, at(bare, "7"), at(armed, "8")) {
		t.Error("the write's own version is not its echo")
	}
	// The event came before the response: the response does not bring the write back.
	a.Expect(key, []string{fin})
	if !a.Echo(key, at(bare, "7"), at(armed, "8")) {
		t.Error("an echo before the response is not taken")
	}
	a.Wrote(key, "8")
	if len(a.m) != 0 {
		t.Error("a response after its echo is remembered")
	}
}
