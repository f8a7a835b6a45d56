package engine

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

func TestTrusted(t *testing.T) {
	const runNamespace = "teardown-system"
	run := func(ns, kind, pns, pname, tns, fin string) *v1alpha1.TeardownRun {
		return &v1alpha1.TeardownRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns},
			Spec: v1alpha1.TeardownRunSpec{
				PolicyRef: v1alpha1.PolicyReference{Kind: kind, Namespace: pns, Name: pname},
				Target:    v1alpha1.TargetObjectReference{Namespace: tns},
				Finalizer: fin,
			},
		}
	}
	tests := []struct {
		name string
		run  *v1alpha1.TeardownRun
		want string // "" = trusted
	}{
		{"namespaced, in target namespace", run("a", "TeardownPolicy", "a", "p", "a", "teardownpolicy.teardown.dev/p"), ""},
		{"namespaced, in run namespace", run("teardown-system", "TeardownPolicy", "a", "p", "a", "teardownpolicy.teardown.dev/p"), ""},
		{"cluster, cluster-scoped target", run("teardown-system", "ClusterTeardownPolicy", "", "c", "", "clusterteardownpolicy.teardown.dev/c"), ""},
		{"another controller's finalizer", run("a", "TeardownPolicy", "a", "p", "a", "kubernetes.io/pvc-protection"), "is not the finalizer of"},
		{"another policy's finalizer", run("a", "TeardownPolicy", "a", "p", "a", "teardownpolicy.teardown.dev/q"), "is not the finalizer of"},
		{"target in another namespace", run("a", "TeardownPolicy", "a", "p", "b", "teardownpolicy.teardown.dev/p"), "lives in its target's namespace"},
		{"namespaced policy reaching out", run("b", "TeardownPolicy", "a", "p", "b", "teardownpolicy.teardown.dev/p"), "its own namespace"},
		{"cluster policy with a namespace", run("a", "ClusterTeardownPolicy", "a", "c", "a", "clusterteardownpolicy.teardown.dev/c"), "must be empty"},
	}
	for _, tt := range tests {
		err := trusted(runNamespace, tt.run)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
}
