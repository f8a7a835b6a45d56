package admissiontrust

import (
	"fmt"
	"io/fs"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	admissionpolicies "github.com/teardown-dev/teardown-operator/config/admission"
)

// shippedPolicy is one admission policy as config/admission ships it.
type shippedPolicy struct {
	policy  *admissionregistrationv1.ValidatingAdmissionPolicy
	binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

var (
	shippedOnce sync.Once
	shipped     map[string]shippedPolicy
	shippedErr  error
)

// shippedByName decodes the shipped manifests once, by policy name.
func shippedByName() (map[string]shippedPolicy, error) {
	shippedOnce.Do(func() { shipped, shippedErr = decodeShipped(admissionpolicies.Files) })
	return shipped, shippedErr
}

func decodeShipped(files fs.FS) (map[string]shippedPolicy, error) {
	out := map[string]shippedPolicy{}
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	decoder := serializer.NewCodecFactory(clientgoscheme.Scheme).UniversalDeserializer()
	for _, name := range names {
		if name == "kustomization.yaml" {
			continue
		}
		raw, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(raw), "\n---\n") {
			obj, _, err := decoder.Decode([]byte(doc), nil, nil)
			if err != nil {
				return nil, fmt.Errorf("decoding the shipped %s: %w", name, err)
			}
			switch o := obj.(type) {
			case *admissionregistrationv1.ValidatingAdmissionPolicy:
				s := out[o.Name]
				s.policy = o
				out[o.Name] = s
			case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
				s := out[o.Name]
				s.binding = o
				out[o.Name] = s
			}
		}
	}
	return out, nil
}

// edited names what of an installed policy and binding differs from the shipped ones ("" when
// nothing does): its rules, what it matches, or a binding that narrows it or takes parameters.
// Labels, annotations and fields the API server defaults are not compared.
func edited(name string, pol *admissionregistrationv1.ValidatingAdmissionPolicy, bind *admissionregistrationv1.ValidatingAdmissionPolicyBinding) (string, error) {
	all, err := shippedByName()
	if err != nil {
		return "", err
	}
	want, ok := all[name]
	if !ok || want.policy == nil || want.binding == nil {
		return "", fmt.Errorf("no admission policy %s is shipped with this operator", name)
	}
	got, ship := pol.Spec, want.policy.Spec
	var parts []string
	for _, c := range []struct {
		what       string
		have, want any
	}{
		{"spec.validations", got.Validations, ship.Validations},
		{"spec.matchConditions", got.MatchConditions, ship.MatchConditions},
		{"spec.variables", got.Variables, ship.Variables},
		{"spec.auditAnnotations", got.AuditAnnotations, ship.AuditAnnotations},
		{"spec.paramKind", got.ParamKind, ship.ParamKind},
		{"spec.matchConstraints", defaulted(got.MatchConstraints), defaulted(ship.MatchConstraints)},
		{"the binding's spec.matchResources", defaulted(bind.Spec.MatchResources), defaulted(want.binding.Spec.MatchResources)},
		{"the binding's spec.paramRef", bind.Spec.ParamRef, want.binding.Spec.ParamRef},
	} {
		if !equality.Semantic.DeepEqual(c.have, c.want) {
			parts = append(parts, c.what)
		}
	}
	return strings.Join(parts, ", "), nil
}

// defaulted is m as the API server stores it (none: matching everything the policy matches), so
// that a manifest and what was made of it compare equal.
func defaulted(m *admissionregistrationv1.MatchResources) *admissionregistrationv1.MatchResources {
	out := &admissionregistrationv1.MatchResources{}
	if m != nil {
		out = m.DeepCopy()
	}
	if out.MatchPolicy == nil {
		out.MatchPolicy = ptr.To(admissionregistrationv1.Equivalent)
	}
	if out.NamespaceSelector == nil {
		out.NamespaceSelector = &metav1.LabelSelector{}
	}
	if out.ObjectSelector == nil {
		out.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{out.ResourceRules, out.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				rules[i].Scope = ptr.To(admissionregistrationv1.AllScopes)
			}
		}
	}
	return out
}
