package httpstep

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// memReader serves Secrets and ConfigMaps from memory, as the API server would, and records reads.
type memReader struct {
	mu    sync.Mutex
	objs  map[string]client.Object // "Secret/ns/name"
	deny  map[string]bool
	reads []string
}

func (m *memReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	kind, resource := "", ""
	switch obj.(type) {
	case *corev1.Secret:
		kind, resource = "Secret", "secrets"
	case *corev1.ConfigMap:
		kind, resource = "ConfigMap", "configmaps"
	default:
		return fmt.Errorf("unexpected %T", obj)
	}
	id := kind + "/" + key.Namespace + "/" + key.Name
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads = append(m.reads, id)
	if m.deny[id] {
		return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, key.Name, fmt.Errorf("no RBAC"))
	}
	src, ok := m.objs[id]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: resource}, key.Name)
	}
	switch o := obj.(type) {
	case *corev1.Secret:
		src.(*corev1.Secret).DeepCopyInto(o)
	case *corev1.ConfigMap:
		src.(*corev1.ConfigMap).DeepCopyInto(o)
	}
	return nil
}

func (m *memReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return fmt.Errorf("not served")
}

func (m *memReader) readList() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.reads...)
}

func newReader(objs ...client.Object) *memReader {
	m := &memReader{objs: map[string]client.Object{}, deny: map[string]bool{}}
	for _, o := range objs {
		kind := "ConfigMap"
		if _, ok := o.(*corev1.Secret); ok {
			kind = "Secret"
		}
		m.objs[kind+"/"+o.GetNamespace()+"/"+o.GetName()] = o
	}
	return m
}

func secretObj(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func withReader(h *harness, r client.Reader) *harness {
	h.kind.reader = r
	return h
}

func secretHeader(name, ns, secret, key string) v1alpha1.HTTPHeader {
	return v1alpha1.HTTPHeader{Name: name, ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: secret, Key: key, Namespace: ns}}}
}

func TestSecretHeaders(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = fmt.Fprintf(w, "bad key %s for %s", r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
	})
	reader := newReader(
		secretObj("ns", "creds", map[string]string{"key": "k3y-from-secret", "auth": "Token t0ken-from-secret", "nl": "Token t0ken-with-newline\n"}),
		secretObj("team", "creds", map[string]string{"key": "team-k3y-value"}),
	)
	reader.deny["Secret/ns/locked"] = true
	h := withReader(newHarness(t, Options{AllowedDestinations: []Destination{srv.dest(t)}}), reader)

	t.Run("namespaced", func(t *testing.T) {
		a := h.compile("call", true, v1alpha1.HTTPStep{URL: srv.URL, Headers: []v1alpha1.HTTPHeader{
			secretHeader("X-Api-Key", "", "creds", "key"), secretHeader("Authorization", "ns", "creds", "auth")}})
		res := newStepRun(t, a, newRun("uid-1"), true, nil).execNow()
		wantResult(t, res, steps.Failed, false, "401 Unauthorized: bad key [redacted] for [redacted]")
		if strings.Contains(res.Message, "from-secret") {
			t.Errorf("message %q leaks a Secret value", res.Message)
		}
		if srv.count() == 0 {
			t.Fatalf("no request")
		}
		last := srv.seen()[len(srv.seen())-1]
		if last.header.Get("X-Api-Key") != "k3y-from-secret" || last.header.Get("Authorization") != "Token t0ken-from-secret" {
			t.Errorf("headers sent %v", last.header)
		}
	})
	t.Run("value with a trailing newline", func(t *testing.T) {
		// kubectl create secret --from-file keeps the file's newline, which no header value may
		// hold: the value is sent without it.
		a := h.compile("call", true, v1alpha1.HTTPStep{URL: srv.URL, Headers: []v1alpha1.HTTPHeader{secretHeader("Authorization", "", "creds", "nl")}})
		res := newStepRun(t, a, newRun("uid-nl"), true, nil).execNow()
		if strings.Contains(res.Message, "with-newline") {
			t.Errorf("message %q leaks the Secret value", res.Message)
		}
		last := srv.seen()[len(srv.seen())-1]
		if got := last.header.Get("Authorization"); strings.ContainsAny(got, "\r\n") || !strings.HasSuffix(got, "with-newline") {
			t.Errorf("Authorization sent as %q, want the Secret value without its trailing newline", got)
		}
	})
	t.Run("cluster policy reads the namespace it names", func(t *testing.T) {
		a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL, Headers: []v1alpha1.HTTPHeader{
			secretHeader("X-Api-Key", "${object.metadata.namespace}", "creds", "key")}})
		obj := map[string]any{"metadata": map[string]any{"name": "db", "namespace": "team"}}
		res := newStepRun(t, a, newRun("uid-2"), false, obj).execNow()
		wantResult(t, res, steps.Failed, false, "bad key [redacted]")
		if got := srv.seen()[len(srv.seen())-1].header.Get("X-Api-Key"); got != "team-k3y-value" {
			t.Errorf("X-Api-Key %q", got)
		}
	})
	failures := []struct {
		name      string
		header    v1alpha1.HTTPHeader
		retryable bool
		want      string
	}{
		{"missing Secret", secretHeader("X-Api-Key", "", "nope", "key"), true,
			"spec.steps[0].http.headers[0].valueFrom.secretKeyRef: Secret ns/nope not found"},
		{"missing key", secretHeader("X-Api-Key", "", "creds", "nokey"), false,
			`spec.steps[0].http.headers[0].valueFrom.secretKeyRef: Secret ns/creds has no key "nokey"`},
		{"forbidden", secretHeader("X-Api-Key", "", "locked", "key"), false,
			"spec.steps[0].http.headers[0].valueFrom.secretKeyRef: the operator may not read Secret ns/locked"},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			before := srv.count()
			a := h.compile("call", true, v1alpha1.HTTPStep{URL: srv.URL, Headers: []v1alpha1.HTTPHeader{tt.header}})
			res := newStepRun(t, a, newRun("uid-"+tt.name), true, nil).execNow()
			wantResult(t, res, steps.Failed, tt.retryable, tt.want)
			if res.State != nil {
				t.Errorf("state %v after a failure before the request", res.State)
			}
			if n := srv.count(); n != before {
				t.Errorf("a request was sent without its header")
			}
		})
	}
	t.Run("run of another namespace", func(t *testing.T) {
		// Compiled for namespace ns, executed for a policy of namespace other: the read is refused
		// at run time too.
		before := len(reader.readList())
		a := h.compile("call", true, v1alpha1.HTTPStep{URL: srv.URL, Headers: []v1alpha1.HTTPHeader{secretHeader("X-Api-Key", "", "creds", "key")}})
		r := newStepRun(t, a, newRun("uid-other"), true, nil)
		r.policyNS = "other"
		wantResult(t, r.execNow(), steps.Failed, false, `a TeardownPolicy may read only its own namespace "other", not "ns"`)
		if n := len(reader.readList()); n != before {
			t.Errorf("the Secret was read")
		}
	})
	for _, r := range reader.readList() {
		if !strings.HasPrefix(r, "Secret/ns/") && r != "Secret/team/creds" {
			t.Errorf("read %s", r)
		}
	}
}

func TestTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "secure") }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	reader := newReader(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ca"}, Data: map[string]string{"ca.crt": caPEM, "bad": "not pem"}},
		secretObj("ns", "ca", map[string]string{"ca.crt": caPEM}),
		secretObj("ns", "half", map[string]string{"tls.crt": caPEM}),
	)
	h := withReader(newHarness(t, Options{AllowedDestinations: []Destination{mustDest(t, srv.Listener.Addr().String())}}), reader)
	ca := func(cm bool, key string) *v1alpha1.HTTPTLS {
		if cm {
			return &v1alpha1.HTTPTLS{CA: &v1alpha1.CABundleSource{ConfigMapKeyRef: &v1alpha1.ConfigMapKeyRef{Name: "ca", Key: key}}}
		}
		return &v1alpha1.HTTPTLS{CA: &v1alpha1.CABundleSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: "ca", Key: key}}}
	}
	tests := []struct {
		name      string
		tls       *v1alpha1.HTTPTLS
		outcome   steps.Outcome
		retryable bool
		want      string
	}{
		{"system roots", nil, steps.Failed, false, "certificate"},
		{"CA from a ConfigMap", ca(true, "ca.crt"), steps.Succeeded, false, "200 OK"},
		{"CA from a Secret", ca(false, "ca.crt"), steps.Succeeded, false, "200 OK"},
		{"bad CA", ca(true, "bad"), steps.Failed, false, "tls: spec.steps[0].http.tls.ca.configMapKeyRef: no PEM certificate in the bundle"},
		{"missing CA key", ca(true, "nokey"), steps.Failed, false, `ConfigMap ns/ca has no key "nokey"`},
		{"client certificate without key", &v1alpha1.HTTPTLS{ClientCertificate: &v1alpha1.ClientCertificateRef{SecretName: "half"}}, steps.Failed, false,
			"spec.steps[0].http.tls.clientCertificate: Secret ns/half needs the keys tls.crt and tls.key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := h.compile("call", true, v1alpha1.HTTPStep{URL: srv.URL, TLS: tt.tls})
			wantResult(t, newStepRun(t, a, newRun("uid-"+tt.name), true, nil).execNow(), tt.outcome, tt.retryable, tt.want)
		})
	}
}
