package naming

import (
	"strings"
	"testing"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestFinalizer(t *testing.T) {
	long := strings.Repeat("a", 70)
	tests := []struct {
		kind, name, want string
	}{
		{"TeardownPolicy", "db", "teardownpolicy.teardown.dev/db"},
		{"ClusterTeardownPolicy", "buckets.prod", "clusterteardownpolicy.teardown.dev/buckets.prod"},
		{"TeardownPolicy", strings.Repeat("b", 63), "teardownpolicy.teardown.dev/" + strings.Repeat("b", 63)},
		{"TeardownPolicy", long, "teardownpolicy.teardown.dev/" + strings.Repeat("a", 52) + "-" + Hash(long)},
		// A prefix ending in a separator must not leave "--" or ".-" behind.
		{"TeardownPolicy", strings.Repeat("a", 51) + "." + strings.Repeat("c", 20), "teardownpolicy.teardown.dev/" + strings.Repeat("a", 51) + "-" + Hash(strings.Repeat("a", 51)+"."+strings.Repeat("c", 20))},
	}
	for _, tt := range tests {
		got := Finalizer(tt.kind, tt.name)
		if got != tt.want {
			t.Errorf("Finalizer(%q, %q) = %q, want %q", tt.kind, tt.name, got, tt.want)
		}
		if errs := validation.IsQualifiedName(got); len(errs) > 0 {
			t.Errorf("Finalizer(%q, %q) = %q is not a qualified name: %v", tt.kind, tt.name, got, errs)
		}
		if !IsOurs(got) {
			t.Errorf("IsOurs(%q) = false", got)
		}
	}
}

func TestFinalizerStable(t *testing.T) {
	// These values are in users' clusters: changing them strands finalizers. Never edit this table.
	if got := Finalizer("TeardownPolicy", strings.Repeat("x", 64)); got != "teardownpolicy.teardown.dev/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx-d7f480d45e" {
		t.Errorf("shortened finalizer changed: %s", got)
	}
}

func TestIsOurs(t *testing.T) {
	tests := map[string]bool{
		"teardownpolicy.teardown.dev/a":        true,
		"clusterteardownpolicy.teardown.dev/a": true,
		"foregroundDeletion":                   false,
		"kubernetes.io/pvc-protection":         false,
		"other.teardown.dev/a":                 false,
		"teardownpolicy.teardown.dev":          false,
	}
	for f, want := range tests {
		if got := IsOurs(f); got != want {
			t.Errorf("IsOurs(%q) = %v, want %v", f, got, want)
		}
	}
}

func TestRunName(t *testing.T) {
	tests := []struct {
		name, target string
		uid          string
		wantPrefix   string
	}{
		{"short", "orders-db", "u1", "orders-db-"},
		{"upper case kinds of names are lowered", "Node-A", "u1", "node-a-"},
		{"long", strings.Repeat("n", 253), "u2", strings.Repeat("n", 52-11) + "-"},
		{"dotted", "a.b.c", "u3", "a.b.c-"},
		{"not a DNS name", "system:kube-proxy@x", "u4", "system-kube-proxy-x-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RunName("TeardownPolicy", "ns", "p", tt.target, k8stypes.UID("uid-"+tt.uid))
			if !strings.HasPrefix(got, tt.wantPrefix) {
				t.Errorf("RunName = %q, want prefix %q", got, tt.wantPrefix)
			}
			if len(got) > MaxLabel {
				t.Errorf("RunName = %q is %d characters", got, len(got))
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("RunName = %q: %v", got, errs)
			}
		})
	}
	a := RunName("TeardownPolicy", "ns", "p", "x", "uid-1")
	if a != RunName("TeardownPolicy", "ns", "p", "x", "uid-1") {
		t.Error("RunName is not deterministic")
	}
	for _, other := range []string{
		RunName("TeardownPolicy", "ns", "p", "x", "uid-2"),
		RunName("TeardownPolicy", "ns", "q", "x", "uid-1"),
		RunName("ClusterTeardownPolicy", "", "p", "x", "uid-1"),
	} {
		if other == a {
			t.Errorf("different deletions share run name %q", a)
		}
	}
}

func TestLabelValue(t *testing.T) {
	if LabelValue("system:a") == LabelValue("system@a") {
		t.Error("names differing only in replaced characters must get different label values")
	}
	for _, in := range []string{"a", strings.Repeat("v", 63), strings.Repeat("v", 64), "-" + strings.Repeat("w", 80), "system:node:x", "oidc:a@b.c"} {
		got := LabelValue(in)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("LabelValue(%q) = %q: %v", in, got, errs)
		}
	}
}
