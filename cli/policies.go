package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// policiesFor lists the policies whose target kind is the object's: the TeardownPolicies of its
// namespace and every ClusterTeardownPolicy.
func (k *kube) policiesFor(ctx context.Context, t *target) ([]policy.View, error) {
	all, err := k.policies(ctx, t.Object.GetNamespace())
	if err != nil {
		return nil, err
	}
	var out []policy.View
	for _, v := range all {
		gv, err := schema.ParseGroupVersion(v.Spec.TargetRef.APIVersion)
		if err == nil && gv.WithKind(v.Spec.TargetRef.Kind) == t.GVK {
			out = append(out, v)
		}
	}
	return out, nil
}

// policies lists the TeardownPolicies of namespace ns (none when ns is empty) and every
// ClusterTeardownPolicy.
func (k *kube) policies(ctx context.Context, ns string) ([]policy.View, error) {
	var out []policy.View
	if ns != "" {
		var tps v1alpha1.TeardownPolicyList
		if err := k.client.List(ctx, &tps, client.InNamespace(ns)); err != nil {
			return nil, apiError(err)
		}
		for i := range tps.Items {
			v, _ := policy.ViewOf(&tps.Items[i])
			out = append(out, v)
		}
	}
	var ctps v1alpha1.ClusterTeardownPolicyList
	if err := k.client.List(ctx, &ctps); apierrors.IsForbidden(err) {
		// A namespace's users may not read cluster policies: plan what they can see, and say so.
		k.clusterPoliciesHidden = true
		return out, nil
	} else if err != nil {
		return nil, apiError(err)
	}
	for i := range ctps.Items {
		v, _ := policy.ViewOf(&ctps.Items[i])
		out = append(out, v)
	}
	return out, nil
}

func readyCondition(s *v1alpha1.TeardownPolicyStatus) *metav1.Condition {
	return meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady)
}

// selectsWhyNot says why a compiled policy does not select obj; "" when it does.
func (k *kube) selectsWhyNot(ctx context.Context, c *policy.Compiled, obj *unstructured.Unstructured) string {
	if !c.InScope(obj.GetNamespace()) {
		return fmt.Sprintf("a TeardownPolicy protects objects of its own namespace %s only", c.Key.Namespace)
	}
	nsLabels := map[string]string{}
	if ns := obj.GetNamespace(); ns != "" && c.NamespaceSelector != nil {
		var n corev1.Namespace
		if err := k.client.Get(ctx, client.ObjectKey{Name: ns}, &n); err == nil {
			nsLabels = n.Labels
		}
	}
	if !c.Selector.Matches(labelSet(obj.GetLabels())) {
		return fmt.Sprintf("its selector (%s) does not select the object's labels", c.Selector)
	}
	if !c.Selects(obj.GetLabels(), nsLabels, obj.GetNamespace() != "") {
		if _, made := obj.GetLabels()[v1alpha1.LabelRunUID]; made {
			return "the object was made by a teardown run, and such objects are never protected"
		}
		return fmt.Sprintf("its namespaceSelector (%s) does not select namespace %s", c.NamespaceSelector, obj.GetNamespace())
	}
	ok, err := c.MatchObject(ctx, obj.Object)
	switch {
	case err != nil:
		return fmt.Sprintf("its match cannot be evaluated on the object: %v", err)
	case !ok:
		return fmt.Sprintf("its match (%s) is false for the object", c.Spec.Match)
	}
	return ""
}

// print writes v as YAML or JSON, or calls text.
func (r *root) print(v any, output string, text func(io.Writer)) error {
	switch output {
	case "json":
		enc := json.NewEncoder(r.streams.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		raw, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = r.streams.Out.Write(raw)
		return err
	}
	text(r.streams.Out)
	return nil
}
