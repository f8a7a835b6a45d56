package chart_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// serviceAccountToken is the file a pod's ServiceAccount token is mounted as: Prometheus' own,
// in its pod.
const serviceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// metricsCertDir is where the chart mounts metrics.certSecret.
const metricsCertDir = "/etc/teardown-operator/metrics-certs"

// TestSecureMetrics: by default the operator serves its metrics over HTTPS to authorized clients
// only, and everything that reaches them follows: the Service's port, the ServiceMonitor (https,
// Prometheus' token, a self-signed certificate accepted), the operator's right to review tokens,
// and a ClusterRole to grant reading them. metrics.certSecret serves a certificate Prometheus can
// verify; metrics.secure=false goes back to plain HTTP.
func TestSecureMetrics(t *testing.T) {
	verified := map[string]any{"insecureSkipVerify": false, "serverName": "teardown-operator-metrics.teardown-system.svc",
		"ca": map[string]any{"secret": map[string]any{"name": "metrics-cert", "key": "ca.crt"}}}
	bearer := map[string]any{"type": "Bearer", "credentials": map[string]any{"name": "prometheus-token", "key": "token"}}
	for name, tc := range map[string]struct {
		values   string
		args     []string // among the container's, in this order
		scheme   string
		endpoint map[string]any // the ServiceMonitor endpoint's fields beside port, path, interval, scrapeTimeout and scheme
		reader   bool
	}{
		"default": {
			values:   "metrics: {serviceMonitor: {enabled: true}}",
			args:     []string{"--metrics-bind-address=:8443", "--metrics-secure=true"},
			scheme:   "https",
			endpoint: map[string]any{"bearerTokenFile": serviceAccountToken, "tlsConfig": map[string]any{"insecureSkipVerify": true}},
			reader:   true,
		},
		"certificate from a Secret, verified": {
			values: `metrics:
  certSecret: metrics-cert
  serviceMonitor:
    enabled: true
    authorization: {type: Bearer, credentials: {name: prometheus-token, key: token}}
    tlsConfig: {insecureSkipVerify: false, serverName: teardown-operator-metrics.teardown-system.svc, ca: {secret: {name: metrics-cert, key: ca.crt}}}`,
			args:     []string{"--metrics-bind-address=:8443", "--metrics-secure=true", "--metrics-cert-dir=" + metricsCertDir},
			scheme:   "https",
			endpoint: map[string]any{"authorization": bearer, "tlsConfig": verified},
			reader:   true,
		},
		"plain HTTP": {
			values:   "metrics: {secure: false, port: 8080, serviceMonitor: {enabled: true}}",
			args:     []string{"--metrics-bind-address=:8080", "--metrics-secure=false"},
			scheme:   "http",
			endpoint: map[string]any{},
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := renderValues(t, tc.values)
			c := mustGet[*appsv1.Deployment](t, r, "Deployment", release).Spec.Template.Spec.Containers[0]
			if got := slices.DeleteFunc(slices.Clone(c.Args), func(a string) bool { return !strings.HasPrefix(a, "--metrics-") }); !slices.Equal(got, tc.args) {
				t.Errorf("metrics flags %v, want %v", got, tc.args)
			}
			port := metricsPort(t, r, c)
			svc := mustGet[*corev1.Service](t, r, "Service", release+"-metrics").Spec.Ports
			want := []corev1.ServicePort{{Name: "metrics", Port: port, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP, AppProtocol: &tc.scheme}}
			if !equality.Semantic.DeepEqual(svc, want) {
				t.Errorf("Service ports %+v, want %+v", svc, want)
			}
			checkEndpoint(t, r, tc.scheme, tc.endpoint)
			checkMetricsRoles(t, r, tc.reader)
		})
	}
}

// metricsPort returns the container's metrics port, and checks that a certificate Secret is
// mounted where --metrics-cert-dir looks, read-only, and that none is mounted without one.
func metricsPort(t *testing.T, r *rendered, c corev1.Container) int32 {
	t.Helper()
	var port int32
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			port = p.ContainerPort
		}
	}
	if port == 0 || !slices.Contains(c.Args, fmt.Sprintf("--metrics-bind-address=:%d", port)) {
		t.Errorf("container ports %+v do not match its args %v", c.Ports, c.Args)
	}
	volumes := mustGet[*appsv1.Deployment](t, r, "Deployment", release).Spec.Template.Spec.Volumes
	if !slices.Contains(c.Args, "--metrics-cert-dir="+metricsCertDir) {
		if len(volumes) != 0 || len(c.VolumeMounts) != 0 {
			t.Errorf("volumes %+v, mounts %+v without metrics.certSecret", volumes, c.VolumeMounts)
		}
		return port
	}
	wantMounts := []corev1.VolumeMount{{Name: "metrics-certs", MountPath: metricsCertDir, ReadOnly: true}}
	if len(volumes) != 1 || volumes[0].Secret == nil || volumes[0].Secret.SecretName != "metrics-cert" || !equality.Semantic.DeepEqual(c.VolumeMounts, wantMounts) {
		t.Errorf("the certificate Secret is not mounted at %s: volumes %+v, mounts %+v", metricsCertDir, volumes, c.VolumeMounts)
	}
	return port
}

// checkEndpoint checks the ServiceMonitor's one endpoint: its scheme, and how it authenticates and
// checks the certificate.
func checkEndpoint(t *testing.T, r *rendered, scheme string, want map[string]any) {
	t.Helper()
	sm, ok := r.find("ServiceMonitor", release).(*unstructured.Unstructured)
	if !ok {
		t.Fatalf("no ServiceMonitor rendered; have %v", r.kinds())
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v, want one", endpoints)
	}
	got := endpoints[0].(map[string]any)
	if got["port"] != "metrics" || got["path"] != "/metrics" || got["scheme"] != scheme {
		t.Errorf("endpoint %v, want port metrics, path /metrics, scheme %s", got, scheme)
	}
	rest := map[string]any{}
	for k, v := range got {
		if !slices.Contains([]string{"port", "path", "scheme", "interval", "scrapeTimeout"}, k) {
			rest[k] = v
		}
	}
	if !equality.Semantic.DeepEqual(rest, want) {
		t.Errorf("endpoint's authentication and TLS %v, want %v", rest, want)
	}
}

// checkMetricsRoles checks that the operator may review the tokens and rights of those who scrape
// it, and that the metrics-reader ClusterRole grants reading the metrics and nothing else.
func checkMetricsRoles(t *testing.T, r *rendered, reader bool) {
	t.Helper()
	operator := mustGet[*rbacv1.ClusterRole](t, r, "ClusterRole", release)
	for _, want := range []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	} {
		if !slices.ContainsFunc(operator.Rules, func(got rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(got, want) }) {
			t.Errorf("the operator's ClusterRole lacks %+v", want)
		}
	}
	o := r.find("ClusterRole", release+"-metrics-reader")
	if !reader {
		if o != nil {
			t.Error("the metrics-reader ClusterRole is rendered for plain HTTP metrics")
		}
		return
	}
	role, ok := o.(*rbacv1.ClusterRole)
	want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
	if !ok || !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("metrics-reader ClusterRole %+v, want rules %+v", o, want)
	}
}
