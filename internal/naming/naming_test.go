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

func TestJobName(t *testing.T) {
	run := RunName("TeardownPolicy", "shop", "orders-db", "orders", "0b7c1f3e-0000-4000-8000-000000000001")
	longRun := RunName("TeardownPolicy", "shop", "orders-db", strings.Repeat("o", 80), "0b7c1f3e-0000-4000-8000-000000000001")
	tests := []struct {
		name    string
		run     string
		step    string
		attempt int32
		want    string
	}{
		{"short", "orders-1a2b3c4d5e", "dump", 1, "orders-1a2b3c4d5e-dump-1"},
		{"attempt in the name", "orders-1a2b3c4d5e", "dump", 12, "orders-1a2b3c4d5e-dump-12"},
		{"dots become dashes", "db.prod-1a2b3c4d5e", "dump", 1, "db-prod-1a2b3c4d5e-dump-1"},
		{"exactly 63", strings.Repeat("r", 55), "abcde", 1, strings.Repeat("r", 55) + "-abcde-1"},
		{"64 is shortened", strings.Repeat("r", 56), "abcde", 1, strings.Repeat("r", 52) + "-" + Hash(strings.Repeat("r", 56)+"-abcde-1")},
		{"real run name", run, "pg-dump", 2, run + "-pg-dump-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := JobName(tt.run, tt.step, tt.attempt)
			if got != tt.want {
				t.Errorf("JobName(%q, %q, %d) = %q, want %q", tt.run, tt.step, tt.attempt, got, tt.want)
			}
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("%q is not a DNS label: %v", got, errs)
			}
		})
	}
	// Long run and step names still give valid, distinct names per attempt and per step.
	seen := map[string]bool{}
	for _, step := range []string{strings.Repeat("s", 63), strings.Repeat("s", 62) + "t"} {
		for attempt := int32(1); attempt <= 3; attempt++ {
			got := JobName(longRun, step, attempt)
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("%q is not a DNS label: %v", got, errs)
			}
			if seen[got] {
				t.Errorf("JobName gave %q twice", got)
			}
			seen[got] = true
		}
	}
}

func TestJobNameStable(t *testing.T) {
	// Jobs in users' clusters are adopted by these names after a restart: never edit this table.
	if got := JobName(strings.Repeat("r", 60), "dump", 1); got != "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr-f19215c8c1" {
		t.Errorf("JobName changed: %q", got)
	}
}

func TestArmingPolicyName(t *testing.T) {
	long := strings.Repeat("n", 253)
	tests := []struct{ ns, name, want string }{
		{"shop", "db", "teardown.dev-arm-tdp-shop.db"},
		{"", "buckets", "teardown.dev-arm-ctdp-buckets"},
		// A cluster policy a.b and a TeardownPolicy b in namespace a do not meet.
		{"", "a.b", "teardown.dev-arm-ctdp-a.b"},
		{"a", "b", "teardown.dev-arm-tdp-a.b"},
	}
	for _, tt := range tests {
		if got := ArmingPolicyName(tt.ns, tt.name); got != tt.want {
			t.Errorf("ArmingPolicyName(%q, %q) = %q; want %q", tt.ns, tt.name, got, tt.want)
		}
	}
	a, b := ArmingPolicyName("shop", long), ArmingPolicyName("shop", long[1:])
	if len(a) > 253 || a == b {
		t.Errorf("long names: %d characters, %q and %q", len(a), a, b)
	}
}
