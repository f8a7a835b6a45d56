package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// Group is the API group of every teardown-operator resource.
const Group = "teardown.dev"

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	SchemeBuilder.Register(&TeardownPolicy{}, &TeardownPolicyList{})
	SchemeBuilder.Register(&ClusterTeardownPolicy{}, &ClusterTeardownPolicyList{})
	SchemeBuilder.Register(&TeardownRun{}, &TeardownRunList{})
}
