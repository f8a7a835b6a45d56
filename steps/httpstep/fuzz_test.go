package httpstep

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Secrets the fuzzed steps send (a sensitive header, a URL password): no response may bring
// them into a message or an output.
const (
	fuzzToken    = "s3cr3t-t0ken-value"
	fuzzPassword = "pa55w0rd-xyz"
)

// fuzzTransport answers every request with what respond makes of it, as a server would; nothing
// is dialed.
type fuzzTransport struct {
	respond func(*http.Request) (*http.Response, error)
}

func (t *fuzzTransport) RoundTrip(r *http.Request) (*http.Response, error) { return t.respond(r) }

// responseFuzzer runs the http steps of the fuzz targets against the answers of one transport.
type responseFuzzer struct {
	mu        sync.Mutex // one input at a time: the transport answers with the current input
	transport *fuzzTransport
	actions   []*action
}

func newResponseFuzzer(f testing.TB) *responseFuzzer {
	f.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		f.Fatal(err)
	}
	rf := &responseFuzzer{transport: &fuzzTransport{}}
	kind := New(nil, nil, Options{Transport: rf.transport})
	auth := []v1alpha1.HTTPHeader{{Name: "Authorization", Value: "Bearer " + fuzzToken}}
	url := "https://user:" + fuzzPassword + "@api.example.com/v1/things/${object.metadata.name}"
	specs := []struct {
		namespaced bool
		spec       v1alpha1.HTTPStep
	}{
		// The status decides.
		{false, v1alpha1.HTTPStep{URL: url, Headers: auth}},
		// A condition and outputs over every part of the response.
		{false, v1alpha1.HTTPStep{URL: url, Method: http.MethodPost, Headers: auth,
			SuccessCondition: "response.status == 200 && response.body.state == 'done' && response.headers['x-phase'] == 'done'",
			Outputs: map[string]v1alpha1.Expression{
				"id": "response.body.id", "body": "response.body", "headers": "response.headers", "status": "response.status",
				"count": "size(response.body.items)", "kind": "type(response.body) == string ? 'text' : 'json'",
			}}},
		// Polling, with a condition that cannot always be evaluated.
		{false, v1alpha1.HTTPStep{URL: url, Headers: auth, SuccessCondition: "response.body.state == 'done'",
			Outputs: map[string]v1alpha1.Expression{"id": "response.body.id"},
			Poll:    &v1alpha1.HTTPPoll{Interval: metav1.Duration{Duration: time.Second}}}},
		// A TeardownPolicy's step following redirects: each is checked against the guard.
		{true, v1alpha1.HTTPStep{URL: url, Headers: auth, FollowRedirects: true,
			SuccessCondition: "response.status < 300 || response.status == 404"}},
	}
	for _, s := range specs {
		spec := s.spec
		act, errs := kind.Compile(steps.CompileContext{Env: env, Namespaced: s.namespaced, Namespace: "ns"},
			&v1alpha1.Step{Name: "call", HTTP: &spec}, stepPath)
		if len(errs) > 0 {
			f.Fatalf("Compile: %v", errs.ToAggregate())
		}
		rf.actions = append(rf.actions, act.(*action))
	}
	return rf
}

// run sends each step's request, answered by respond, and checks what the step makes of the
// response: a result with a message, valid JSON outputs, and no secret anywhere.
func (rf *responseFuzzer) run(t *testing.T, respond func(*http.Request) (*http.Response, error)) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	rf.transport.respond = respond
	ctx := context.Background()
	for i, a := range rf.actions {
		in := &steps.Input{
			Run:    newRun("uid-1"),
			Status: &v1alpha1.StepStatus{Name: "call", Phase: v1alpha1.StepRunning, Attempts: 1},
			Vars: expr.Vars{
				"object": map[string]any{"metadata": map[string]any{"name": "db", "namespace": "ns"}},
				"steps":  map[string]any{},
				"run":    map[string]any{"name": "run-uid-1", "uid": "run-uid-uid-1", "attempt": int64(1)},
			},
			Now: time.Now(),
		}
		if a.namespaced {
			in.PolicyNamespace = "ns"
		}
		req, fail := a.prepare(ctx, in)
		if fail != nil {
			t.Fatalf("step %d: prepare: %s", i, fail.Message)
		}
		client, err := a.kind.clients.get(a.namespaced, a.follow, req.material)
		if err != nil {
			t.Fatalf("step %d: client: %v", i, err)
		}
		x := a.do(client, req)
		st := state{requests: 1} // Execute counts the request before it evaluates the response
		res := a.evaluate(ctx, in, x, &st)
		if res.Outcome != steps.InProgress && res.Outcome != steps.Succeeded && res.Outcome != steps.Failed {
			t.Errorf("step %d: outcome %d", i, res.Outcome)
		}
		if res.Message == "" {
			t.Errorf("step %d: %s without a message", i, outcome(res.Outcome))
		}
		if res.RetryAfter < 0 || res.RetryAfter > 24*time.Hour {
			t.Errorf("step %d: RetryAfter %s", i, res.RetryAfter)
		}
		for _, secret := range []string{fuzzToken, fuzzPassword} {
			if strings.Contains(res.Message, secret) {
				t.Errorf("step %d: message %q holds a secret", i, res.Message)
			}
		}
		for name, out := range res.Outputs {
			if !json.Valid(out.Raw) {
				t.Errorf("step %d: outputs.%s = %q: not JSON", i, name, out.Raw)
			}
			for _, secret := range []string{fuzzToken, fuzzPassword} {
				if strings.Contains(string(out.Raw), secret) {
					t.Errorf("step %d: outputs.%s = %s holds a secret", i, name, out.Raw)
				}
			}
		}
		if res.Outcome == steps.Succeeded && len(res.Outputs) != len(a.outputs) {
			t.Errorf("step %d succeeded with outputs %v, want %d", i, res.Outputs, len(a.outputs))
		}
	}
}

// responseSeed is one answer of the unit tables (execute_test.go): status, reason phrase,
// header lines and body.
type responseSeed struct {
	status int
	reason string
	header string
	body   string
}

var responseSeeds = []responseSeed{
	{201, "Created", "Content-Type: application/json", `{"ok":true}`},
	{204, "No Content", "Content-Type: application/json", ""},
	{200, "OK", "Content-Type: application/json; charset=utf-8\nX-Phase: done",
		`{"id":9007199254740993,"small":42,"ratio":0.5,"state":"done","items":[1,2,3],"nested":{"name":"snap"}}`},
	{200, "OK", "Content-Type: text/plain", `{"state":"done"}`},
	{200, "OK", "Content-Type: application/problem+json", `{"state":"done"}`},
	{200, "OK", "Content-Type: application/json", `{"state":`},
	{200, "OK", "Content-Type: application/json", `[1,2]`},
	{200, "OK", "Content-Type: application/json", `{"state":"pending"}`},
	{200, "OK", "Content-Type: application/json", `{"progress":10}`},
	{404, "Not Found", "Content-Type: application/json", `{}`},
	{503, "Service Unavailable", "Content-Type: application/json", `{"error":"overloaded"}`},
	{503, "Service Unavailable", "Content-Type: text/html", "<html>Service Unavailable</html>"},
	{429, "Too Many Requests", "Content-Type: application/json", `{"error":"slow down"}`},
	{503, "Service Unavailable", "Retry-After: 120", "try later"},
	{500, "Internal Server Error", "", "boom"},
	{502, "Bad Gateway", "", ""},
	{429, "Too Many Requests", "Retry-After: 7", "slow down"},
	{429, "Too Many Requests", "Retry-After: Thu, 02 Jan 2025 03:05:35 GMT", ""},
	{429, "Too Many Requests", "Retry-After: soon", ""},
	{429, "Too Many Requests", "Retry-After: 999999999999", ""},
	{429, "Too Many Requests", "Retry-After: -3", ""},
	{400, "Bad Request", "", `{"error": "bad input",` + "\n" + `"field": "name"}`},
	{409, "Conflict", "", ""},
	{501, "Not Implemented", "", "nope"},
	{302, "Found", "Location: /new?x=1", ""},
	{307, "Temporary Redirect", "Location: /new", ""},
	{302, "Found", "Location: http://169.254.169.254/latest/meta-data/", ""},
	{302, "Found", "Location: https://api.example.com:99999/", ""},
	{400, "Bad Request", "Content-Type: application/json",
		`{"error":"invalid credentials Bearer ` + fuzzToken + `","token":"` + fuzzToken + `","nested":{"list":["token=` + fuzzToken + `"]}}`},
	{200, "OK", "Content-Type: application/json", `{"state":"done","id":"` + fuzzToken + `","items":[]}`},
	{401, "Bearer " + fuzzToken, "Content-Length: 2", "no"},
	{200, "OK", "", strings.Repeat("x", 300)},
}

// header is seed.header as header lines.
func (s responseSeed) headerLines() string {
	if s.header == "" {
		return ""
	}
	return strings.ReplaceAll(s.header, "\n", "\r\n") + "\r\n"
}

// FuzzResponse answers the steps' requests with a response made of an arbitrary status code,
// reason phrase, header lines ("Name: value", one a line) and body, as a transport could hand
// it over: nothing a server sends may make the step panic or leak a secret.
func FuzzResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add(s.status, s.reason, s.header, []byte(s.body))
	}
	f.Add(-1, "", "Content-Type: application/json\nContent-Type: text/plain", []byte(`{"a":1}`))
	f.Add(1000, "?", "content-type: application/json;;", []byte(`{"a":1} {"b":2}`))
	rf := newResponseFuzzer(f)
	f.Fuzz(func(t *testing.T, status int, reason, header string, body []byte) {
		h := http.Header{}
		for _, line := range strings.Split(header, "\n") {
			if name, value, ok := strings.Cut(line, ":"); ok {
				h.Add(textproto.CanonicalMIMEHeaderKey(name), strings.TrimSpace(value))
			}
		}
		rf.run(t, func(r *http.Request) (*http.Response, error) {
			return &http.Response{
				Status: strconv.Itoa(status) + " " + reason, StatusCode: status,
				Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: h.Clone(), Body: io.NopCloser(bytes.NewReader(body)), ContentLength: -1, Request: r,
			}, nil
		})
	})
}

// FuzzRawResponse answers the steps' requests with arbitrary bytes read as an HTTP/1.x response
// (status line, headers, body, as net/http reads them from a connection): nothing a server sends
// may make the step panic or leak a secret.
func FuzzRawResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte("HTTP/1.1 " + strconv.Itoa(s.status) + " " + s.reason + "\r\n" + s.headerLines() +
			"Content-Length: " + strconv.Itoa(len(s.body)) + "\r\n\r\n" + s.body))
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"))
	f.Add([]byte("HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"till\":\"close\"}"))
	f.Add([]byte("HTTP/1.1 999 \r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200\r\nX-Folded: a\r\n b\r\n\r\n"))
	f.Add([]byte("garbage"))
	rf := newResponseFuzzer(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		rf.run(t, func(r *http.Request) (*http.Response, error) {
			return http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), r)
		})
	})
}
