package admission

import (
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// Settle is how long whoever deletes an admission policy waits before releasing the objects it
// armed: the API server applies an admission policy from a watch of its own, and an object it arms
// after the release would keep a finalizer nobody removes.
const Settle = 2 * time.Second

// ManagedBy is the value of v1alpha1.LabelManagedBy on the admission objects, which selects them
// all.
const ManagedBy = v1alpha1.ManagedBy

// Condition names in the admission policy, visible in its YAML.
const (
	conditionNotArmed = "not-armed"
	conditionMatch    = "policy-match"
)

// Spec is what one teardown policy arms at creation.
type Spec struct {
	PolicyKind      string // TeardownPolicy or ClusterTeardownPolicy
	PolicyNamespace string // a TeardownPolicy's; empty for a ClusterTeardownPolicy
	PolicyName      string
	PolicyUID       types.UID
	Finalizer       string
	// Resource is the target kind's resource, and Namespaced its scope.
	Resource   schema.GroupVersionResource
	Namespaced bool
	// Selector and NamespaceSelector are the policy's (nil: every object, every namespace);
	// NamespaceSelector applies to namespaced kinds only.
	Selector, NamespaceSelector *metav1.LabelSelector
	// Match is the policy's CEL match, checked with CheckMatch; empty when it has none.
	Match string
}

// Name is the name of the admission policy and of its binding.
func (s Spec) Name() string { return naming.ArmingPolicyName(s.PolicyNamespace, s.PolicyName) }

// PolicyRef names the teardown policy as the annotation v1alpha1.AnnotationPolicy does.
func (s Spec) PolicyRef() string {
	if s.PolicyNamespace == "" {
		return s.PolicyKind + "/" + s.PolicyName
	}
	return s.PolicyKind + "/" + s.PolicyNamespace + "/" + s.PolicyName
}

// Labels name the teardown policy the admission objects arm for.
func (s Spec) Labels() map[string]string {
	l := map[string]string{
		v1alpha1.LabelManagedBy:  ManagedBy,
		v1alpha1.LabelPolicyKind: s.PolicyKind,
		v1alpha1.LabelPolicy:     naming.LabelValue(s.PolicyName),
		v1alpha1.LabelPolicyUID:  string(s.PolicyUID),
	}
	if s.PolicyNamespace != "" {
		l[v1alpha1.LabelPolicyNamespace] = s.PolicyNamespace
	}
	return l
}

// Build returns the admission policy and its binding. A ClusterTeardownPolicy owns them, so that
// the garbage collector removes them should the operator not; a TeardownPolicy cannot own a
// cluster-scoped object, and the engine removes them by their labels.
func Build(s Spec) (*admissionv1.MutatingAdmissionPolicy, *admissionv1.MutatingAdmissionPolicyBinding) {
	meta := metav1.ObjectMeta{Name: s.Name(), Labels: s.Labels(), Annotations: map[string]string{v1alpha1.AnnotationPolicy: s.PolicyRef()}}
	if s.PolicyNamespace == "" {
		meta.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: s.PolicyKind,
			Name: s.PolicyName, UID: s.PolicyUID}}
	}
	policy := &admissionv1.MutatingAdmissionPolicy{ObjectMeta: *meta.DeepCopy(), Spec: admissionv1.MutatingAdmissionPolicySpec{
		// Ignore: a create must never be refused because of a teardown policy. An object
		// whose arming fails at admission is armed by the operator, as on a cluster without
		// admission policies.
		FailurePolicy: ptr.To(admissionv1.Ignore),
		// IfNeeded: a mutation after this one (a webhook adding labels) is seen, and the
		// finalizer is added then if the object has come to match.
		ReinvocationPolicy: admissionv1.IfNeededReinvocationPolicy,
		MatchConstraints:   s.constraints(),
		MatchConditions:    s.conditions(),
		Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeJSONPatch, JSONPatch: &admissionv1.JSONPatch{
			Expression: addFinalizer(s.Finalizer)}}},
	}}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: meta, Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{
		PolicyName: s.Name()}}
	return policy, binding
}

// constraints select CREATEs of the target kind (through any version of it: matchPolicy
// Equivalent) that the policy's selectors select. Objects a step made for a run are never
// targets, as in the engine (policy.Compiled.Selects).
func (s Spec) constraints() *admissionv1.MatchResources {
	objects := metav1.LabelSelector{}
	if s.Selector != nil {
		objects = *s.Selector.DeepCopy()
	}
	objects.MatchExpressions = append(objects.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: v1alpha1.LabelRunUID, Operator: metav1.LabelSelectorOpDoesNotExist})
	namespaces := metav1.LabelSelector{}
	switch {
	case !s.Namespaced:
		// A namespace selector would select a Namespace by its own labels: the engine does not.
	case s.PolicyNamespace != "":
		namespaces.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name",
			Operator: metav1.LabelSelectorOpIn, Values: []string{s.PolicyNamespace}}}
	case s.NamespaceSelector != nil:
		namespaces = *s.NamespaceSelector.DeepCopy()
	}
	scope := admissionv1.ClusterScope
	if s.Namespaced {
		scope = admissionv1.NamespacedScope
	}
	return &admissionv1.MatchResources{
		MatchPolicy:       ptr.To(admissionv1.Equivalent),
		ObjectSelector:    &objects,
		NamespaceSelector: &namespaces,
		ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: []admissionv1.OperationType{admissionv1.Create},
			Rule: admissionv1.Rule{APIGroups: []string{s.Resource.Group}, APIVersions: []string{s.Resource.Version},
				Resources: []string{s.Resource.Resource}, Scope: &scope},
		}}},
	}
}

// conditions skip an object that already carries the finalizer, and one the match rejects.
func (s Spec) conditions() []admissionv1.MatchCondition {
	fin := quote(s.Finalizer)
	out := []admissionv1.MatchCondition{{Name: conditionNotArmed,
		Expression: "!has(object.metadata.finalizers) || !(" + fin + " in object.metadata.finalizers)"}}
	if s.Match != "" {
		out = append(out, admissionv1.MatchCondition{Name: conditionMatch, Expression: s.Match})
	}
	return out
}

// addFinalizer is the JSON patch that appends the finalizer, creating the list if need be.
func addFinalizer(finalizer string) string {
	fin := quote(finalizer)
	return `has(object.metadata.finalizers) ? ` +
		`[JSONPatch{op: "add", path: "/metadata/finalizers/-", value: ` + fin + `}] : ` +
		`[JSONPatch{op: "add", path: "/metadata/finalizers", value: [` + fin + `]}]`
}

// quote is a CEL string literal: Go's double-quoted form, whose escapes CEL shares for the
// characters a finalizer may hold.
func quote(s string) string { return strconv.Quote(s) }

// Objects are the binding and the admission policy of that name, binding first: deleted in that
// order, the admission policy does nothing once its binding is gone.
func Objects(name string) []client.Object {
	return []client.Object{
		&admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}},
	}
}
