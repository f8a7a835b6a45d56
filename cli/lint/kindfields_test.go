package lint

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestKindFields(t *testing.T) {
	deployment := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	configMap := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	secret := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	tests := []struct {
		gvk    schema.GroupVersionKind
		fields string
		want   bool
	}{
		{deployment, "spec", true},
		{deployment, "spec.template.spec.containers", true}, // required: no omitempty
		{deployment, "spec.replicas", true},                 // defaulted by the API server
		{deployment, "status", true},
		{deployment, "status.readyReplicas", false},
		{deployment, "spec.template.spec.nodeName", false},
		{configMap, "data", false},
		{secret, "type", true},
		{secret, "data", false},
	}
	for _, tc := range tests {
		if got := kindFields(tc.gvk)(strings.Split(tc.fields, ".")); got != tc.want {
			t.Errorf("%s %s: always there %v, want %v", tc.gvk.Kind, tc.fields, got, tc.want)
		}
	}
	if kindFields(schema.GroupVersionKind{Group: "example.teardown.dev", Version: "v1", Kind: "ManagedDatabase"}) != nil {
		t.Error("a custom kind: want nothing known")
	}
}
