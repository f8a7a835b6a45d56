package v1alpha1

import "k8s.io/apimachinery/pkg/runtime/schema"

// GroupVersionKind is the kind of the object a run tears down (empty when its apiVersion does not
// parse, which the CRD's schema does not let through).
func (t TargetObjectReference) GroupVersionKind() schema.GroupVersionKind {
	gv, _ := schema.ParseGroupVersion(t.APIVersion)
	return gv.WithKind(t.Kind)
}
