package secretdata

import (
	"reflect"
	"testing"
)

func TestWithout(t *testing.T) {
	applied := "kubectl.kubernetes.io/last-applied-configuration"
	secret := func() map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
			"metadata":   map[string]any{"name": "db", "annotations": map[string]any{applied: `{"data":{"password":"aHVudGVyMg=="}}`, "team": "a"}},
			"data":       map[string]any{"password": "aHVudGVyMg=="},
			"stringData": map[string]any{"user": "root"}}
	}
	for _, tc := range []struct {
		name     string
		in, want map[string]any
	}{
		{"a Secret loses its data, its string data and the applied copy of both", secret(),
			map[string]any{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
				"metadata": map[string]any{"name": "db", "annotations": map[string]any{"team": "a"}}}},
		{"a Secret without annotations", map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "db"}, "data": map[string]any{"k": "dg=="}},
			map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "db"}}},
		{"a ConfigMap keeps its data", map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"k": "v"}},
			map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"k": "v"}}},
		{"a custom kind named Secret keeps its data", map[string]any{"apiVersion": "vault.example.com/v1", "kind": "Secret", "data": map[string]any{"k": "v"}},
			map[string]any{"apiVersion": "vault.example.com/v1", "kind": "Secret", "data": map[string]any{"k": "v"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Without(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Without:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
	in := secret()
	Without(in)
	if !reflect.DeepEqual(in, secret()) {
		t.Errorf("Without changed its input: %v", in)
	}
}
