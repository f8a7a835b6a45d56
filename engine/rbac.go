package engine

// The operator's permissions. Targets can be any kind a policy names, so the operator reads,
// watches and patches (for finalizers) every resource, and deletes the objects of two-phase
// policies (spec.trigger DeleteRequest) once their pipeline succeeded; a cluster administrator
// may narrow the wildcard rule to the kinds their policies use (the chart's rbac.targetRules), so
// what the operator reads whatever its policies are is granted on its own. The operator creates,
// updates and deletes one MutatingAdmissionPolicy and binding per Ready policy, which arm its
// targets at creation (policy_arming.go), and reads the ValidatingAdmissionPolicies its trust
// rests on (internal/admissiontrust), never writing them.
//
// +kubebuilder:rbac:groups=teardown.dev,resources=teardownpolicies;clusterteardownpolicies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=teardown.dev,resources=teardownpolicies/status;clusterteardownpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=teardown.dev,resources=teardownruns,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=teardown.dev,resources=teardownruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=*,resources=*,verbs=get;list;watch;patch;update;delete
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingadmissionpolicies;mutatingadmissionpolicybindings,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch;update
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
