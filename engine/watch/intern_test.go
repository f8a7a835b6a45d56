package watch

import (
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// decoded returns an object as a decoder makes it: every string a copy of its own.
func decoded(name string, labels, annotations map[string]string) *metav1.PartialObjectMetadata {
	c := func(s string) string { return string([]byte(s)) }
	cm := func(m map[string]string) map[string]string {
		if m == nil {
			return nil
		}
		out := map[string]string{}
		for k, v := range m {
			out[c(k)] = c(v)
		}
		return out
	}
	return &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: c("meta.k8s.io/v1"), Kind: c("PartialObjectMetadata")},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: c("shop"), Labels: cm(labels), Annotations: cm(annotations),
			Finalizers:      []string{c("teardown.dev/orders")},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: c("apps/v1"), Kind: c("ReplicaSet"), Name: "web-1"}},
		},
	}
}

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func sameString(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestInternerShares(t *testing.T) {
	web := map[string]string{"app": "web", "tier": "front"}
	big := map[string]string{"doc": strings.Repeat("x", maxSharedSetBytes)}
	tests := []struct {
		name         string
		a, b         map[string]string
		shared       bool
		wantNilAfter bool
	}{
		{name: "equal sets", a: web, b: map[string]string{"tier": "front", "app": "web"}, shared: true},
		{name: "a value differs", a: web, b: map[string]string{"app": "web", "tier": "back"}},
		{name: "a key more", a: web, b: map[string]string{"app": "web", "tier": "front", "x": ""}},
		{name: "key and value run together", a: map[string]string{"ab": "c"}, b: map[string]string{"a": "bc"}},
		{name: "a value holding what would separate entries", a: map[string]string{"a/x": "1\x00a/y\x001"}, b: map[string]string{"a/x": "1", "a/y": "1"}},
		{name: "a value holding a length", a: map[string]string{"a": "\x01b\x01c"}, b: map[string]string{"a": "", "b": "c"}},
		{name: "too large to share", a: big, b: big},
		{name: "empty", a: map[string]string{}, b: map[string]string{}, wantNilAfter: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := newInterner()
			a, b := decoded("a", tt.a, tt.a), decoded("b", tt.b, nil)
			in.object(a)
			in.object(b)
			if !maps.Equal(a.Labels, tt.a) || !maps.Equal(b.Labels, tt.b) || !maps.Equal(a.Annotations, tt.a) {
				t.Fatalf("contents changed: %v, %v, %v", a.Labels, b.Labels, a.Annotations)
			}
			if tt.wantNilAfter && (a.Labels != nil || b.Labels != nil) {
				t.Errorf("empty sets kept: %#v, %#v", a.Labels, b.Labels)
			}
			if got := sameMap(a.Labels, b.Labels); got != tt.shared && !tt.wantNilAfter {
				t.Errorf("labels shared = %v, want %v", got, tt.shared)
			}
		})
	}
}

func TestInternerStrings(t *testing.T) {
	in := newInterner()
	a, b := decoded("a", map[string]string{"app": "web"}, nil), decoded("b", map[string]string{"app": "db"}, nil)
	in.object(a)
	in.object(b)
	pairs := map[string][2]string{
		"apiVersion":          {a.APIVersion, b.APIVersion},
		"kind":                {a.Kind, b.Kind},
		"namespace":           {a.Namespace, b.Namespace},
		"finalizer":           {a.Finalizers[0], b.Finalizers[0]},
		"owner's kind":        {a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind},
		"owner's API version": {a.OwnerReferences[0].APIVersion, b.OwnerReferences[0].APIVersion},
	}
	for what, p := range pairs {
		if p[0] != p[1] || !sameString(p[0], p[1]) {
			t.Errorf("%s: %q and %q not one copy", what, p[0], p[1])
		}
	}
	var ka, kb string
	for k := range a.Labels {
		ka = k
	}
	for k := range b.Labels {
		kb = k
	}
	if !sameString(ka, kb) {
		t.Error("a label key of two different sets is not one copy")
	}
}

func TestInternerBound(t *testing.T) {
	in := newInterner()
	first := decoded("first", map[string]string{"n": "0"}, nil)
	in.object(first)
	for i := 1; i <= maxSharedSets; i++ {
		in.object(decoded(fmt.Sprint(i), map[string]string{"n": fmt.Sprint(i)}, nil))
	}
	if len(in.sets) > maxSharedSets {
		t.Fatalf("%d sets remembered, bound %d", len(in.sets), maxSharedSets)
	}
	again := decoded("again", map[string]string{"n": "0"}, nil)
	in.object(again)
	if sameMap(first.Labels, again.Labels) {
		t.Error("a set forgotten at the bound was still handed out")
	}
	if first.Labels["n"] != "0" || again.Labels["n"] != "0" {
		t.Errorf("contents changed: %v %v", first.Labels, again.Labels)
	}
}
