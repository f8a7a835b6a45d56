package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HTTPStep calls an HTTP endpoint once per attempt, or repeatedly while it polls.
// +kubebuilder:validation:XValidation:rule="!(has(self.body) && has(self.jsonBody))",message="set at most one of body or jsonBody"
// +kubebuilder:validation:XValidation:rule="!has(self.poll) || has(self.successCondition)",message="poll needs a successCondition: the step polls while it is false"
type HTTPStep struct {
	// method of the request. Defaults to GET.
	// +optional
	// +kubebuilder:default=GET
	// +kubebuilder:validation:Enum=GET;HEAD;POST;PUT;PATCH;DELETE;OPTIONS
	Method string `json:"method,omitempty"`

	// url to call, http or https, with ${...} CEL interpolation over `object`, `steps` and `run`.
	// Example: "https://db.example.com/v1/instances/${object.spec.instanceID}/snapshots".
	// For a TeardownPolicy, loopback, link-local (cloud metadata), private addresses and the
	// cluster's API server are refused unless the operator allows them.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	URL string `json:"url"`

	// headers to send. Each has a literal value (with ${...} interpolation) or a value from a
	// Secret key. Values from Secrets and Authorization headers are redacted from status, events
	// and logs. An Idempotency-Key header, stable for the deletion and step, is added unless set here.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Headers []HTTPHeader `json:"headers,omitempty"`

	// body to send, with ${...} CEL interpolation. Set at most one of body and jsonBody.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Body string `json:"body,omitempty"`

	// jsonBody is a CEL expression over `object`, `steps` and `run` whose value is sent as JSON,
	// with Content-Type application/json unless a header sets it.
	// Example: "{'reason': 'teardown', 'name': object.metadata.name}".
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	JSONBody string `json:"jsonBody,omitempty"`

	// timeout of one request, from connecting to reading the whole response. Defaults to 10s;
	// at most 60s. The step's own timeout bounds all its attempts and polls together.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('60s')",message="must be more than 0s and at most 60s"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// tls configures the certificate authorities to trust and a client certificate. Server
	// certificates are always verified.
	// +optional
	TLS *HTTPTLS `json:"tls,omitempty"`

	// successCondition is a CEL condition over `response` (status, headers, body), `object`,
	// `steps` (earlier steps) and `run`. `response` is typed: `status` is an int, `headers` maps
	// lower-case names to string values, `body` is the parsed value when the response is JSON, else
	// a string; a type error such as "response.status == 'ok'" makes the policy not Ready.
	// Defaults to any 2xx status. Example: "response.status in [200, 204, 404]".
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	SuccessCondition string `json:"successCondition,omitempty"`

	// outputs maps a name to a CEL expression over `response` (and `object`, `steps`, `run`),
	// evaluated when the step succeeds. The values are kept in the run's status, also after the
	// target is gone, and later steps read them as `steps.<step>.outputs.<name>`.
	// Example: {"snapshotID": "response.body.id"}. Names are CEL identifiers; at most 16. A later
	// step's reference to a name not declared here makes the policy not Ready.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Outputs map[string]Expression `json:"outputs,omitempty"`

	// poll repeats the request while the successCondition is false and the response is a 2xx,
	// at an interval, until the step's timeout. This follows asynchronous work (such as a
	// snapshot) without holding a worker.
	// +optional
	Poll *HTTPPoll `json:"poll,omitempty"`

	// followRedirects follows up to 5 redirects to the same scheme, host and port. By default a
	// redirect is not followed and fails the step.
	// +optional
	FollowRedirects bool `json:"followRedirects,omitempty"`
}

// Expression is a CEL expression.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=4096
type Expression string

// HTTPHeader is one request header.
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFrom)",message="set exactly one of value or valueFrom"
type HTTPHeader struct {
	// name of the header, for example "Authorization".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	Name string `json:"name"`

	// value of the header, with ${...} CEL interpolation over `object`, `steps` and `run`.
	// Literal Authorization values are redacted from status and events but are readable by anyone
	// who can read the policy or its runs: use valueFrom for credentials.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	Value string `json:"value,omitempty"`

	// valueFrom reads the value from a Secret key. The value is never written to status,
	// events or logs.
	// +optional
	ValueFrom *HeaderValueSource `json:"valueFrom,omitempty"`
}

// HeaderValueSource says where a header's value comes from.
type HeaderValueSource struct {
	// secretKeyRef names a key of a Secret.
	// +required
	SecretKeyRef *SecretKeyRef `json:"secretKeyRef"`
}

// SecretKeyRef names one key of a Secret.
type SecretKeyRef struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`

	// namespace of the Secret, with ${...} interpolation (for example
	// "${object.metadata.namespace}"). A TeardownPolicy may read Secrets only in its own
	// namespace, which is the default; a ClusterTeardownPolicy must set it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Namespace string `json:"namespace,omitempty"`
}

// ConfigMapKeyRef names one key of a ConfigMap.
type ConfigMapKeyRef struct {
	// name of the ConfigMap.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key in the ConfigMap's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`

	// namespace of the ConfigMap, with the same rules as a SecretKeyRef's.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Namespace string `json:"namespace,omitempty"`
}

// HTTPTLS says whom to trust and how to authenticate over TLS.
type HTTPTLS struct {
	// ca is a PEM bundle of the certificate authorities to trust instead of the system's.
	// +optional
	CA *CABundleSource `json:"ca,omitempty"`

	// clientCertificate names a Secret of type kubernetes.io/tls (keys tls.crt and tls.key)
	// whose certificate the step presents.
	// +optional
	ClientCertificate *ClientCertificateRef `json:"clientCertificate,omitempty"`
}

// CABundleSource is where a PEM bundle of certificate authorities is read from.
// +kubebuilder:validation:XValidation:rule="has(self.secretKeyRef) != has(self.configMapKeyRef)",message="set exactly one of secretKeyRef or configMapKeyRef"
type CABundleSource struct {
	// secretKeyRef names a Secret key holding the bundle.
	// +optional
	SecretKeyRef *SecretKeyRef `json:"secretKeyRef,omitempty"`

	// configMapKeyRef names a ConfigMap key holding the bundle.
	// +optional
	ConfigMapKeyRef *ConfigMapKeyRef `json:"configMapKeyRef,omitempty"`
}

// ClientCertificateRef names a kubernetes.io/tls Secret.
type ClientCertificateRef struct {
	// secretName is the Secret's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`

	// namespace of the Secret, with the same rules as a SecretKeyRef's.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Namespace string `json:"namespace,omitempty"`
}

// HTTPPoll repeats a request until its successCondition holds.
type HTTPPoll struct {
	// interval between requests, for example "15s". At least 1s.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="must be between 1s and 24h"
	Interval metav1.Duration `json:"interval"`
}
