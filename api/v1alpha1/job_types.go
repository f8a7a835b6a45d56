package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
)

// JobStep runs a Kubernetes Job and waits for it to finish. Each attempt creates one Job, with a
// name fixed by the run, the step and the attempt, so a repeat after a crash finds the Job it
// made instead of making another.
type JobStep struct {
	// namespace to run the Job in, with ${...} interpolation. A TeardownPolicy runs Jobs only in
	// its own namespace, which is the default and the only value it may set. For a
	// ClusterTeardownPolicy it defaults to the target's namespace and must be set for
	// cluster-scoped targets; name a namespace of your own (for example "teardown-jobs") for
	// Jobs that must run while the target's namespace is being deleted.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Namespace string `json:"namespace,omitempty"`

	// template is the Job to create. Every string in it takes ${...} CEL interpolation over
	// `object`, `steps` and `run`; write $${ for a literal ${ (as in a shell script).
	// +required
	Template JobTemplate `json:"template"`

	// successCondition is a CEL condition over `job` (the Job object: metadata, spec, status,
	// type-checked as a batch/v1 Job), `object`, `steps` (earlier steps) and `run`, checked
	// whenever the Job changes. When it holds, the step succeeds, even before the Job completes. A
	// Job that completes while it is false fails the attempt; a Job that fails always fails the
	// attempt. By default the step succeeds when the Job completes. Status counts are absent until
	// set, so read them with a default. Example: "job.?status.?succeeded.orValue(0) >= 2".
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	SuccessCondition string `json:"successCondition,omitempty"`
}

// JobTemplate is the Job a job step creates.
type JobTemplate struct {
	// metadata of the Job: labels and annotations. The name is chosen by the operator, and it adds
	// labels (teardown.dev/...) that tie the Job to its run, policy and target.
	// +optional
	Metadata JobTemplateMetadata `json:"metadata,omitempty"`

	// spec is a batch/v1 JobSpec (see `kubectl explain job.spec`). The operator adds environment
	// variables naming the target and the run to every container (TEARDOWN_TARGET_API_VERSION,
	// TEARDOWN_TARGET_KIND, TEARDOWN_TARGET_NAMESPACE, TEARDOWN_TARGET_NAME, TEARDOWN_TARGET_UID,
	// TEARDOWN_RUN_NAME, TEARDOWN_RUN_NAMESPACE, TEARDOWN_RUN_UID, TEARDOWN_STEP, TEARDOWN_ATTEMPT),
	// caps activeDeadlineSeconds at the step's timeout, and sets ttlSecondsAfterFinished
	// (default 3600) only once the step has recorded the Job's outcome. spec.selector is chosen
	// by the Job controller and may not be set.
	// +required
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Spec runtime.RawExtension `json:"spec"`
}

// JobTemplateMetadata is the part of a Job's metadata a template may set.
type JobTemplateMetadata struct {
	// labels of the Job, values with ${...} interpolation.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations of the Job, values with ${...} interpolation.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}
