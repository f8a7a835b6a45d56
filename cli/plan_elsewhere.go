package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// planElsewhere names the TeardownPolicies of other namespaces that target an object's kind when
// none of its own namespace does: the policy a user expected may be in the wrong namespace.
type planElsewhere struct {
	Policies []string `json:"policies"`
	Message  string   `json:"message"`
}

// policiesElsewhere finds them; nil when the object's namespace has one, when there are none, or
// when the user may not list TeardownPolicies in every namespace.
func (k *kube) policiesElsewhere(ctx context.Context, t *target, inScope []policy.View) *planElsewhere {
	for _, v := range inScope {
		if v.Key.Namespaced() {
			return nil
		}
	}
	var all v1alpha1.TeardownPolicyList
	if err := k.client.List(ctx, &all); err != nil {
		return nil
	}
	out := &planElsewhere{}
	for _, p := range all.Items {
		gv, err := schema.ParseGroupVersion(p.Spec.TargetRef.APIVersion)
		if err == nil && gv.WithKind(p.Spec.TargetRef.Kind) == t.GVK && p.Namespace != t.Object.GetNamespace() {
			out.Policies = append(out.Policies, policy.KindNamespaced+"/"+p.Namespace+"/"+p.Name)
		}
	}
	if len(out.Policies) == 0 {
		return nil
	}
	if ns := t.Object.GetNamespace(); ns != "" {
		out.Message = fmt.Sprintf("TeardownPolicies of other namespaces target %s: %s; a TeardownPolicy protects only objects in its own namespace, and this object is in %s: create the policy in %s, or use a ClusterTeardownPolicy",
			t.GVK.Kind, strings.Join(out.Policies, ", "), ns, ns)
	} else {
		out.Message = fmt.Sprintf("TeardownPolicies target %s: %s; but %s is cluster-scoped and a TeardownPolicy protects only objects in its own namespace: use a ClusterTeardownPolicy",
			t.GVK.Kind, strings.Join(out.Policies, ", "), t.GVK.Kind)
	}
	return out
}

func printElsewhere(w io.Writer, e *planElsewhere) {
	if e != nil {
		fmt.Fprintf(w, "  %s\n", e.Message)
	}
}
