package httpstep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// prepare renders the request and reads the Secrets and ConfigMaps it names. A failure is
// returned as the step's result.
func (a *action) prepare(ctx context.Context, in *steps.Input) (*request, *steps.Result) {
	req := &request{method: a.method, header: http.Header{}, redact: &redactor{}}
	raw, err := a.url.Render(ctx, in.Vars)
	if err != nil {
		return nil, failed(false, "url: %v", err)
	}
	if req.u, err = a.kind.checkURL(raw, a.namespaced); err != nil {
		var refused *RefusedError
		var invalid *invalidAddrError
		if errors.As(err, &refused) || errors.As(err, &invalid) {
			return nil, failed(false, "%s %s: %v", a.method, withoutPassword(raw), err)
		}
		return nil, failed(false, "url %q: %v", withoutPassword(raw), err)
	}
	if pw, ok := req.u.User.Password(); ok {
		req.redact.add(pw)
	}
	for i, h := range a.headers {
		v, fail := a.headerValue(ctx, in, i, h, req.redact)
		if fail != nil {
			return nil, fail
		}
		req.header.Set(h.name, v)
	}
	if req.header.Get(HeaderIdempotencyKey) == "" {
		key := IdempotencyKey(in.DeletionID(), a.step, in.Run.Status.Retries)
		if in.Ending > 1 {
			key += fmt.Sprintf("-e%d", in.Ending) // a finally step's request for a later ending is another one
		}
		req.header.Set(HeaderIdempotencyKey, key)
	}
	if req.header.Get("User-Agent") == "" {
		req.header.Set("User-Agent", a.kind.userAgent)
	}
	switch {
	case a.body != nil:
		s, err := a.body.Render(ctx, in.Vars)
		if err != nil {
			return nil, failed(false, "body: %v", err)
		}
		req.body = []byte(s)
	case a.jsonBody != nil:
		if req.body, err = a.jsonBody.EvalJSON(ctx, in.Vars); err != nil {
			return nil, failed(false, "jsonBody: %v", err)
		}
		if req.header.Get("Content-Type") == "" {
			req.header.Set("Content-Type", "application/json")
		}
	}
	if a.tls != nil {
		m, fail := a.readTLS(ctx, in)
		if fail != nil {
			return nil, fail
		}
		req.material = m
	}
	req.sent = time.Now()
	return req, nil
}

// withoutPassword is a URL for messages: with any password replaced.
func withoutPassword(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if at := strings.LastIndex(raw, "@"); at >= 0 {
		if scheme := strings.Index(raw, "://"); scheme >= 0 && scheme < at {
			return raw[:scheme+3] + redacted + raw[at:]
		}
	}
	return raw
}

// IdempotencyKey is the Idempotency-Key of every request of one step for one deletion (see
// steps.Input.DeletionID): the same across attempts, polls and operator restarts, and whether or
// not a TeardownRun is recorded.
//
// A retry of the run asked for after a failure (teardown.dev/retry) gets a new key: the failure
// was looked at and its cause fixed, and an API that stores its answer per key would otherwise
// answer the new request with the stored failure.
func IdempotencyKey(deletionID, step string, retries int32) string {
	if retries > 0 {
		return fmt.Sprintf("%s-%s-r%d", deletionID, step, retries)
	}
	return deletionID + "-" + step
}

func (a *action) readTLS(ctx context.Context, in *steps.Input) (*tlsMaterial, *steps.Result) {
	m := &tlsMaterial{}
	if ref := a.tls.ca; ref != nil {
		data, fail := a.readKey(ctx, in, ref, a.tls.caIsSecret)
		if fail != nil {
			return nil, fail
		}
		m.ca, m.caPath = data, ref.path
	}
	if ref := a.tls.client; ref != nil {
		sec, fail := a.readSecret(ctx, in, ref)
		if fail != nil {
			return nil, fail
		}
		m.cert, m.key, m.clientPath = sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey], ref.path
		if len(m.cert) == 0 || len(m.key) == 0 {
			return nil, failed(false, "%s: Secret %s/%s needs the keys %s and %s", ref.path, sec.Namespace, sec.Name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
		}
	}
	return m, nil
}

// readKey reads one key of a Secret (secret) or ConfigMap.
func (a *action) readKey(ctx context.Context, in *steps.Input, ref *keyRef, secret bool) ([]byte, *steps.Result) {
	if secret {
		sec, fail := a.readSecret(ctx, in, ref)
		if fail != nil {
			return nil, fail
		}
		v, ok := sec.Data[ref.key]
		if !ok {
			return nil, failed(false, "%s: Secret %s/%s has no key %q", ref.path, sec.Namespace, sec.Name, ref.key)
		}
		return v, nil
	}
	cm := &corev1.ConfigMap{}
	if fail := a.get(ctx, in, ref, "ConfigMap", cm); fail != nil {
		return nil, fail
	}
	if v, ok := cm.Data[ref.key]; ok {
		return []byte(v), nil
	}
	if v, ok := cm.BinaryData[ref.key]; ok {
		return v, nil
	}
	return nil, failed(false, "%s: ConfigMap %s/%s has no key %q", ref.path, cm.Namespace, cm.Name, ref.key)
}

func (a *action) readSecret(ctx context.Context, in *steps.Input, ref *keyRef) (*corev1.Secret, *steps.Result) {
	sec := &corev1.Secret{}
	if fail := a.get(ctx, in, ref, "Secret", sec); fail != nil {
		return nil, fail
	}
	return sec, nil
}

// get reads the object ref names, from the namespace the policy may read.
func (a *action) get(ctx context.Context, in *steps.Input, ref *keyRef, kind string, obj client.Object) *steps.Result {
	ns, err := ref.namespace.Render(ctx, in.Vars)
	if err != nil {
		return failed(false, "%s.namespace: %v", ref.path, err)
	}
	if in.Namespaced() && ns != in.PolicyNamespace {
		return failed(false, "%s: a TeardownPolicy may read only its own namespace %q, not %q", ref.path, in.PolicyNamespace, ns)
	}
	err = a.kind.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.name}, obj)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		// Retryable: the object may be created yet.
		return failed(true, "%s: %s %s/%s not found", ref.path, kind, ns, ref.name)
	case apierrors.IsForbidden(err):
		return failed(false, "%s: the operator may not read %s %s/%s: %v", ref.path, kind, ns, ref.name, err)
	}
	return failed(true, "%s: reading %s %s/%s: %v", ref.path, kind, ns, ref.name, err)
}

func failed(retryable bool, format string, args ...any) *steps.Result {
	r := steps.Fail(retryable, format, args...)
	return &r
}

var errTooLarge = errors.New("body too large")

// readBounded reads all of r, or fails with errTooLarge past limit bytes. On a read error it
// returns what it read before it.
func readBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return b, err
	}
	if int64(len(b)) > limit {
		return nil, errTooLarge
	}
	return b, nil
}

// view is the response as CEL sees it: status, headers (lower-case names, values joined with
// ", ") and body (parsed when the response is JSON, else a string).
func (x *exchange) view() map[string]any {
	headers := make(map[string]any, len(x.header))
	for k, v := range x.header {
		headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	var body any = string(x.body)
	if isJSON(x.header.Get("Content-Type")) {
		if v, ok := decodeJSON(x.body); ok {
			body = v
		}
	}
	return map[string]any{"status": int64(x.status), "headers": headers, "body": body}
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// decodeJSON parses b, keeping integers as int64 (float64 would round large IDs).
func decodeJSON(b []byte) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return nil, false
	}
	return numbers(v), true
}

func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}

// evalOutputs evaluates the outputs, with secret values removed.
func (a *action) evalOutputs(ctx context.Context, vars expr.Vars, r *redactor) (map[string]apiextensionsv1.JSON, error) {
	if len(a.outputs) == 0 {
		return nil, nil
	}
	out := make(map[string]apiextensionsv1.JSON, len(a.outputs))
	for name, prog := range a.outputs {
		raw, err := prog.EvalJSON(ctx, vars)
		if err != nil {
			return nil, fmt.Errorf("outputs.%s: %w", name, err)
		}
		if len(r.secrets) > 0 {
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber() // numbers are written back as they were
			var v any
			if err := d.Decode(&v); err != nil {
				return nil, fmt.Errorf("outputs.%s: %w", name, err)
			}
			if raw, err = json.Marshal(r.value(v)); err != nil {
				return nil, fmt.Errorf("outputs.%s: %w", name, err)
			}
		}
		out[name] = apiextensionsv1.JSON{Raw: raw}
	}
	return out, nil
}
