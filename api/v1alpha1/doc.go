// Package v1alpha1 holds the teardown.dev/v1alpha1 API: TeardownPolicy and ClusterTeardownPolicy,
// which say what must happen before an object may go, and TeardownRun, which records one deletion's
// pipeline.
//
// +kubebuilder:object:generate=true
// +groupName=teardown.dev
package v1alpha1
