package admission

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

func TestBuild(t *testing.T) {
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	tests := []struct {
		name       string
		spec       Spec
		wantName   string
		wantNS     *metav1.LabelSelector
		wantOwner  bool
		wantScope  admissionv1.ScopeType
		wantObject []metav1.LabelSelectorRequirement
		wantMatch  bool
	}{{
		name: "a TeardownPolicy arms its own namespace only",
		spec: Spec{PolicyKind: "TeardownPolicy", PolicyNamespace: "shop", PolicyName: "db", PolicyUID: "u1",
			Finalizer: "teardownpolicy.teardown.dev/db", Resource: configMaps, Namespaced: true,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
		wantName: "teardown.dev-arm-tdp-shop.db",
		wantNS: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name",
			Operator: metav1.LabelSelectorOpIn, Values: []string{"shop"}}}},
		wantScope:  admissionv1.NamespacedScope,
		wantObject: []metav1.LabelSelectorRequirement{{Key: v1alpha1.LabelRunUID, Operator: metav1.LabelSelectorOpDoesNotExist}},
	}, {
		name: "a ClusterTeardownPolicy owns them and keeps its namespace selector and match",
		spec: Spec{PolicyKind: "ClusterTeardownPolicy", PolicyName: "buckets", PolicyUID: "u2",
			Finalizer: "clusterteardownpolicy.teardown.dev/buckets", Resource: configMaps, Namespaced: true,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}, Match: "object.data.size == 'big'"},
		wantName:   "teardown.dev-arm-ctdp-buckets",
		wantNS:     &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
		wantOwner:  true,
		wantScope:  admissionv1.NamespacedScope,
		wantObject: []metav1.LabelSelectorRequirement{{Key: v1alpha1.LabelRunUID, Operator: metav1.LabelSelectorOpDoesNotExist}},
		wantMatch:  true,
	}, {
		name: "a cluster-scoped kind has no namespace selector",
		spec: Spec{PolicyKind: "ClusterTeardownPolicy", PolicyName: "ns", PolicyUID: "u3", Finalizer: "clusterteardownpolicy.teardown.dev/ns",
			Resource:          schema.GroupVersionResource{Version: "v1", Resource: "namespaces"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			Selector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}}}},
		wantName:  "teardown.dev-arm-ctdp-ns",
		wantNS:    &metav1.LabelSelector{},
		wantOwner: true,
		wantScope: admissionv1.ClusterScope,
		wantObject: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists},
			{Key: v1alpha1.LabelRunUID, Operator: metav1.LabelSelectorOpDoesNotExist}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, b := Build(tt.spec)
			if p.Name != tt.wantName || b.Name != tt.wantName || b.Spec.PolicyName != tt.wantName {
				t.Fatalf("names %s, %s -> %s; want %s", p.Name, b.Name, b.Spec.PolicyName, tt.wantName)
			}
			if got := len(p.OwnerReferences) == 1; got != tt.wantOwner {
				t.Errorf("owner references %v; want one: %v", p.OwnerReferences, tt.wantOwner)
			}
			if p.Labels[v1alpha1.LabelManagedBy] != ManagedBy || p.Labels[v1alpha1.LabelPolicyUID] != string(tt.spec.PolicyUID) || p.Annotations[v1alpha1.AnnotationPolicy] != tt.spec.PolicyRef() {
				t.Errorf("labels %v, annotations %v", p.Labels, p.Annotations)
			}
			if *p.Spec.FailurePolicy != admissionv1.Ignore || p.Spec.ReinvocationPolicy != admissionv1.IfNeededReinvocationPolicy {
				t.Errorf("failurePolicy %s, reinvocationPolicy %s; want Ignore, IfNeeded", *p.Spec.FailurePolicy, p.Spec.ReinvocationPolicy)
			}
			mc := p.Spec.MatchConstraints
			rule := mc.ResourceRules[0]
			if *rule.Scope != tt.wantScope || rule.Resources[0] != tt.spec.Resource.Resource || rule.Operations[0] != admissionv1.Create || *mc.MatchPolicy != admissionv1.Equivalent {
				t.Errorf("rule %+v, matchPolicy %s", rule, *mc.MatchPolicy)
			}
			if got, want := mc.NamespaceSelector.String(), tt.wantNS.String(); got != want {
				t.Errorf("namespace selector %s; want %s", got, want)
			}
			if got, want := (&metav1.LabelSelector{MatchExpressions: mc.ObjectSelector.MatchExpressions}).String(),
				(&metav1.LabelSelector{MatchExpressions: tt.wantObject}).String(); got != want {
				t.Errorf("object selector expressions %s; want %s", got, want)
			}
			if got := len(p.Spec.MatchConditions) == 2; got != tt.wantMatch {
				t.Errorf("match conditions %v; want the policy's match: %v", p.Spec.MatchConditions, tt.wantMatch)
			}
			if !strings.Contains(p.Spec.Mutations[0].JSONPatch.Expression, `"`+tt.spec.Finalizer+`"`) {
				t.Errorf("mutation %s does not add %s", p.Spec.Mutations[0].JSONPatch.Expression, tt.spec.Finalizer)
			}
			// The policy's own selector is not changed by the run-uid requirement.
			if tt.spec.Selector != nil && len(tt.spec.Selector.MatchExpressions) > 1 {
				t.Errorf("Build changed the policy's selector: %v", tt.spec.Selector)
			}
		})
	}
}

// TestBuiltExpressionsCompile compiles what Build writes as the API server would.
func TestBuiltExpressionsCompile(t *testing.T) {
	p, _ := Build(Spec{PolicyKind: "TeardownPolicy", PolicyNamespace: "a", PolicyName: "b", Finalizer: "teardownpolicy.teardown.dev/b",
		Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaced: true, Match: "has(object.data)"})
	for _, c := range p.Spec.MatchConditions {
		if err := CheckMatch(c.Expression, nil); err != nil {
			t.Errorf("match condition %s: %v", c.Name, err)
		}
	}
}

func TestCheckMatch(t *testing.T) {
	tests := []struct {
		expr    string
		wantErr string
	}{
		{"object.metadata.labels['tier'] == 'db'", ""},
		{"object.?spec.?size.orValue(0) > 10 && object.metadata.name.startsWith('prod-')", ""},
		{"sets.contains(['a', 'b'], ['a']) && 'A'.lowerAscii() == 'a'", ""},
		{"math.greatest(1, 2) == 2", "undeclared reference to 'math'"},
		{"base64.encode(b'x') != ''", "undeclared reference to 'base64'"},
		{"'ab'.reverse() == 'ba'", "no matching overload for 'reverse'"},
		{"steps.snapshot.phase == 'Succeeded'", "undeclared reference to 'steps'"},
		{"object.metadata.name", "must evaluate to bool"},
	}
	for _, tt := range tests {
		err := CheckMatch(tt.expr, nil)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tt.expr, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: error %v; want one with %q", tt.expr, err, tt.wantErr)
		case err != nil && !strings.Contains(err.Error(), "Kubernetes 1.36"):
			t.Errorf("%s: error %v does not name the API server's version", tt.expr, err)
		}
	}
}
