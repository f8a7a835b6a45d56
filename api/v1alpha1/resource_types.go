package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ResourceStep creates, applies, patches or deletes Kubernetes objects through the API server, as a
// ServiceAccount, and may wait until the object reaches a condition. Every API call the step makes
// is made as that ServiceAccount (impersonation), so its Role decides what the step may do.
// +kubebuilder:validation:XValidation:rule="self.action in ['Create', 'Apply'] ? has(self.manifest) : true",message="manifest is required for Create and Apply"
// +kubebuilder:validation:XValidation:rule="self.action in ['Patch', 'Delete'] ? has(self.target) : true",message="target is required for Patch and Delete"
type ResourceStep struct {
	// serviceAccountName is the ServiceAccount the step acts as: every API call it makes (create,
	// apply, patch, delete, and the reads that check conditions) is impersonated as
	// system:serviceaccount:<namespace>:<name>, so the ServiceAccount's RBAC decides what the step
	// may do. Required in a TeardownPolicy, where it names a ServiceAccount of the policy's own
	// namespace. In a ClusterTeardownPolicy it may be left empty: the step then acts with the
	// operator's own rights.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// serviceAccountNamespace is the namespace of the ServiceAccount: required with
	// serviceAccountName in a ClusterTeardownPolicy. A TeardownPolicy's ServiceAccount is always
	// in the policy's namespace, the only value it may set here.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ServiceAccountNamespace string `json:"serviceAccountNamespace,omitempty"`

	// action is what the step does: Create makes the object in manifest (a retry, or a repeat
	// after a crash, adopts the object this step made for the same deletion); Apply makes or
	// updates it by server-side apply; Patch changes the target object (a merge or JSON patch,
	// also of its scale or status subresource); Delete deletes the target object, or every object
	// its selector picks.
	// +required
	// +kubebuilder:validation:Enum=Create;Apply;Patch;Delete
	Action ResourceAction `json:"action"`

	// manifest is the object to create or apply, written as YAML: apiVersion, kind and
	// metadata.name are required, metadata.namespace defaults to the target's namespace (a
	// TeardownPolicy's own namespace, the only one it may name). Every string takes ${...} CEL
	// interpolation over `object`, `steps` and `run`; a string that is exactly one ${...} takes the
	// expression's value with its type, so "${size(object.spec.volumes)}" fills an integer field.
	// Write $${ for a literal ${. Created objects get labels naming the deletion
	// (teardown.dev/deletion) and the step (teardown.dev/step).
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Manifest *runtime.RawExtension `json:"manifest,omitempty"`

	// target names the object a Patch or Delete acts on.
	// +optional
	Target *ResourceTarget `json:"target,omitempty"`

	// patch is the patch of a Patch action, as YAML: an object for Merge, a list of operations for
	// JSON. Strings take ${...} interpolation, as in manifest.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	Patch *runtime.RawExtension `json:"patch,omitempty"`

	// patchType is the kind of patch: Merge (a JSON merge patch, RFC 7386; the default) or JSON
	// (a JSON patch, RFC 6902).
	// +optional
	// +kubebuilder:validation:Enum=Merge;JSON
	PatchType ResourcePatchType `json:"patchType,omitempty"`

	// propagationPolicy of a Delete: Background (the default), Foreground or Orphan.
	// +optional
	// +kubebuilder:validation:Enum=Background;Foreground;Orphan
	PropagationPolicy *metav1.DeletionPropagation `json:"propagationPolicy,omitempty"`

	// waitForDeletion makes a Delete wait until the objects are gone (their finalizers done), not
	// only marked for deletion. Defaults to true.
	// +optional
	WaitForDeletion *bool `json:"waitForDeletion,omitempty"`

	// successCondition is a CEL condition over `resource` (the object as the API server has it
	// now), `object`, `steps` and `run`. The step succeeds once it holds, checked after the
	// action, whenever the object changes, and every interval. `resource` is typed from the
	// schema the cluster publishes for the kind, so a misspelt field makes the policy not Ready.
	// Unset, the step succeeds once the action is done. Not for Delete.
	// Example: "resource.?status.?phase.orValue('') == 'completed'".
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	SuccessCondition string `json:"successCondition,omitempty"`

	// failureCondition is a CEL condition like successCondition; when it holds, the attempt fails
	// (the step's retry applies; a retry adopts the same object, so put ${run.attempt} in
	// metadata.name to create a new one per attempt). Not for Delete.
	// Example: "resource.?status.?phase.orValue('') == 'failed'".
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	FailureCondition string `json:"failureCondition,omitempty"`

	// outputs maps a name to a CEL expression over `resource` (and `object`, `steps`, `run`),
	// evaluated when the step succeeds; later steps read them as `steps.<step>.outputs.<name>`.
	// The outputs name and namespace (the object's) are always set. Names are CEL identifiers; at
	// most 16. Not for Delete.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Outputs map[string]Expression `json:"outputs,omitempty"`

	// interval between checks of the conditions, or of a deletion, when no change to the object
	// woke the step. Defaults to 10s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (one year)"
	Interval *metav1.Duration `json:"interval,omitempty"`
}

// ResourceAction is what a resource step does.
type ResourceAction string

// Resource step actions.
const (
	ResourceCreate ResourceAction = "Create"
	ResourceApply  ResourceAction = "Apply"
	ResourcePatch  ResourceAction = "Patch"
	ResourceDelete ResourceAction = "Delete"
)

// ResourcePatchType is the kind of patch a Patch action sends.
type ResourcePatchType string

// Patch types.
const (
	PatchMerge ResourcePatchType = "Merge"
	PatchJSON  ResourcePatchType = "JSON"
)

// ResourceTarget names the object (or, for Delete, the objects) a resource step patches or
// deletes.
// +kubebuilder:validation:XValidation:rule="has(self.name) != has(self.selector)",message="set exactly one of name or selector"
type ResourceTarget struct {
	// apiVersion of the object, for example "apps/v1".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`

	// kind of the object, for example "StatefulSet".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`

	// name of the object, with ${...} interpolation, for example "${object.metadata.name}".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// selector picks the objects to delete by label (Delete only); values take ${...}
	// interpolation. The ServiceAccount needs list as well as delete.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// namespace of the object, with ${...} interpolation. Defaults to the target's namespace; a
	// TeardownPolicy acts only in its own namespace. Ignored for cluster-scoped kinds.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Namespace string `json:"namespace,omitempty"`

	// subresource to patch: scale (for example to scale a StatefulSet to 0) or status. Patch only.
	// +optional
	// +kubebuilder:validation:Enum=scale;status
	Subresource string `json:"subresource,omitempty"`
}
