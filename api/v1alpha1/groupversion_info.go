package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of every teardown-operator resource.
const Group = "teardown.dev"

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&TeardownPolicy{}, &TeardownPolicyList{},
		&ClusterTeardownPolicy{}, &ClusterTeardownPolicyList{},
		&TeardownRun{}, &TeardownRunList{},
		&TeardownApproval{}, &TeardownApprovalList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
