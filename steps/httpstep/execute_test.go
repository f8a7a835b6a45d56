package httpstep

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/steps"
)

var stepPath = field.NewPath("spec", "steps").Index(0)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// seen is one request a test server received.
type seen struct {
	method, path string
	header       http.Header
	body         string
}

// server is a real loopback HTTP server that records the requests it receives.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	requests []seen
}

func newServer(t *testing.T, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, seen{method: r.Method, path: r.URL.RequestURI(), header: r.Header.Clone(), body: string(b)})
		s.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) seen() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.requests...)
}

func (s *server) count() int { return len(s.seen()) }

// addr is the server's ip:port.
func (s *server) addr() string { return s.Listener.Addr().String() }

func (s *server) port() int64 {
	_, p, _ := net.SplitHostPort(s.addr())
	n, _ := strconv.ParseInt(p, 10, 64)
	return n
}

func (s *server) dest(t *testing.T) Destination { return mustDest(t, s.addr()) }

// harness is an http Kind with a wake channel and a CEL environment.
type harness struct {
	t     *testing.T
	kind  *Kind
	env   *expr.Env
	wakes chan types.NamespacedName
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatalf("NewEnv: %v", err)
	}
	if opts.InlineWait == 0 {
		opts.InlineWait = 5 * time.Second
	}
	h := &harness{t: t, env: env, wakes: make(chan types.NamespacedName, 64)}
	h.kind = New(nil, func(n types.NamespacedName) {
		select {
		case h.wakes <- n:
		default:
		}
	}, opts)
	return h
}

func (h *harness) compileErrs(name string, namespaced bool, spec v1alpha1.HTTPStep) (steps.Action, field.ErrorList) {
	return h.kind.Compile(steps.CompileContext{Env: h.env, Namespaced: namespaced, Namespace: "ns"},
		&v1alpha1.Step{Name: name, HTTP: &spec}, stepPath)
}

func (h *harness) compile(name string, namespaced bool, spec v1alpha1.HTTPStep) steps.Action {
	h.t.Helper()
	a, errs := h.compileErrs(name, namespaced, spec)
	if len(errs) > 0 {
		h.t.Fatalf("Compile: %v", errs.ToAggregate())
	}
	return a
}

// waitWake waits for the run to be woken.
func (h *harness) waitWake(run *v1alpha1.TeardownRun) {
	h.t.Helper()
	select {
	case n := <-h.wakes:
		if want := (types.NamespacedName{Namespace: run.Namespace, Name: run.Name}); n != want {
			h.t.Errorf("woke %v, want %v", n, want)
		}
	case <-time.After(5 * time.Second):
		h.t.Fatalf("the run was not woken")
	}
}

func (h *harness) noWake() {
	h.t.Helper()
	select {
	case n := <-h.wakes:
		h.t.Errorf("woke %v while a reconcile waited for the response", n)
	default:
	}
}

// newRun is a run of policy p for the deletion of a target whose UID is uid.
func newRun(uid string) *v1alpha1.TeardownRun {
	return &v1alpha1.TeardownRun{
		ObjectMeta: metav1.ObjectMeta{Name: "run-" + uid, Namespace: "ns", UID: types.UID("run-uid-" + uid)},
		Spec: v1alpha1.TeardownRunSpec{
			PolicyRef: v1alpha1.PolicyReference{Kind: "TeardownPolicy", Namespace: "ns", Name: "p"},
			Target:    v1alpha1.TargetObjectReference{UID: types.UID(uid)},
		},
	}
}

// stepRun is one step of one run, with its status kept between executions as the engine does.
type stepRun struct {
	t          *testing.T
	action     steps.Action
	run        *v1alpha1.TeardownRun
	status     v1alpha1.StepStatus
	vars       expr.Vars
	namespaced bool
	policyNS   string // PolicyNamespace when namespaced; "" means "ns"
}

func newStepRun(t *testing.T, a steps.Action, run *v1alpha1.TeardownRun, namespaced bool, object map[string]any) *stepRun {
	if object == nil {
		object = map[string]any{}
	}
	if _, ok := object["metadata"]; !ok {
		object["metadata"] = map[string]any{"name": "db", "namespace": "ns"}
	}
	return &stepRun{
		t: t, action: a, run: run, namespaced: namespaced,
		status: v1alpha1.StepStatus{Name: "call", Phase: v1alpha1.StepRunning, Attempts: 1},
		vars: expr.Vars{
			"object": object,
			"steps":  map[string]any{},
			"run":    map[string]any{"name": run.Name, "uid": string(run.UID), "attempt": int64(1)},
		},
	}
}

func (r *stepRun) exec(now time.Time) steps.Result {
	in := &steps.Input{Run: r.run, Status: r.status.DeepCopy(), Vars: r.vars, Now: now}
	if r.namespaced {
		in.PolicyNamespace = "ns"
		if r.policyNS != "" {
			in.PolicyNamespace = r.policyNS
		}
	}
	res := r.action.Execute(context.Background(), in)
	if res.State != nil {
		r.status.State = res.State
	}
	r.status.Message = res.Message
	return res
}

func (r *stepRun) execNow() steps.Result { return r.exec(time.Now()) }

func outcome(o steps.Outcome) string {
	return map[steps.Outcome]string{steps.InProgress: "InProgress", steps.Succeeded: "Succeeded", steps.Failed: "Failed"}[o]
}

func wantResult(t *testing.T, res steps.Result, o steps.Outcome, retryable bool, parts ...string) {
	t.Helper()
	if res.Outcome != o {
		t.Errorf("outcome %s (%q), want %s", outcome(res.Outcome), res.Message, outcome(o))
	}
	if res.Outcome == steps.Failed && res.Retryable != retryable {
		t.Errorf("retryable = %v, want %v (%q)", res.Retryable, retryable, res.Message)
	}
	for _, p := range parts {
		if !strings.Contains(res.Message, p) {
			t.Errorf("message %q does not contain %q", res.Message, p)
		}
	}
}

func jsonHandler(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func TestKind(t *testing.T) {
	k := New(nil, nil, Options{})
	var _ steps.Kind = k
	if k.Name() != "http" {
		t.Errorf("Name() = %q", k.Name())
	}
	if k.Configured(&v1alpha1.Step{Name: "x"}) || !k.Configured(&v1alpha1.Step{Name: "x", HTTP: &v1alpha1.HTTPStep{}}) {
		t.Errorf("Configured does not follow step.http")
	}
	if k.inlineWait != DefaultInlineWait || k.userAgent != "teardown-operator" || cap(k.calls.slots) != DefaultMaxInFlight {
		t.Errorf("defaults: inlineWait %s, userAgent %q, max in flight %d", k.inlineWait, k.userAgent, cap(k.calls.slots))
	}
}

func TestExecuteSuccess(t *testing.T) {
	srv := newServer(t, jsonHandler(http.StatusCreated, `{"ok":true}`))
	h := newHarness(t, Options{AllowedDestinations: []Destination{srv.dest(t)}, UserAgent: "test-agent"})
	a := h.compile("call", true, v1alpha1.HTTPStep{Method: http.MethodPost, URL: srv.URL + "/v1/things/${object.metadata.name}"})
	r := newStepRun(t, a, newRun("uid-1"), true, nil)
	res := r.execNow()
	wantResult(t, res, steps.Succeeded, false)
	if want := "POST " + srv.URL + "/v1/things/db: 201 Created"; res.Message != want {
		t.Errorf("message %q, want %q", res.Message, want)
	}
	if res.Outputs != nil {
		t.Errorf("outputs %v, want none", res.Outputs)
	}
	if got := res.State[stateRequests]; got != "1" {
		t.Errorf("state %v, want requests 1", res.State)
	}
	got := srv.seen()
	if len(got) != 1 {
		t.Fatalf("server saw %d requests, want 1", len(got))
	}
	if got[0].method != http.MethodPost || got[0].path != "/v1/things/db" {
		t.Errorf("request %s %s", got[0].method, got[0].path)
	}
	if ua := got[0].header.Get("User-Agent"); ua != "test-agent" {
		t.Errorf("User-Agent %q", ua)
	}
}

func TestExecuteDefaultMethodAndUserAgent(t *testing.T) {
	srv := newServer(t, jsonHandler(http.StatusNoContent, ""))
	h := newHarness(t, Options{})
	a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL + "/x"})
	res := newStepRun(t, a, newRun("uid-1"), false, nil).execNow()
	wantResult(t, res, steps.Succeeded, false, "GET "+srv.URL+"/x: 204 No Content")
	if ua := srv.seen()[0].header.Get("User-Agent"); ua != "teardown-operator" {
		t.Errorf("User-Agent %q", ua)
	}
}

func TestSuccessConditionAndOutputs(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("X-Phase", "done")
		_, _ = io.WriteString(w, `{"id":9007199254740993,"small":42,"ratio":0.5,"state":"done","items":[1,2,3],"nested":{"name":"snap"}}`)
	})
	h := newHarness(t, Options{})
	a := h.compile("call", false, v1alpha1.HTTPStep{
		URL:              srv.URL,
		SuccessCondition: "response.status == 200 && response.body.state == 'done' && response.headers['x-phase'] == 'done' && response.body.id == 9007199254740993",
		Outputs: map[string]v1alpha1.Expression{
			"id":     "response.body.id",
			"small":  "response.body.small",
			"ratio":  "response.body.ratio",
			"name":   "response.body.nested.name",
			"count":  "size(response.body.items)",
			"phase":  "response.headers['x-phase']",
			"status": "response.status",
			"target": "object.metadata.name",
		},
	})
	res := newStepRun(t, a, newRun("uid-1"), false, nil).execNow()
	wantResult(t, res, steps.Succeeded, false, "200 OK")
	want := map[string]string{
		"small": "42", "ratio": "0.5", "name": `"snap"`, "count": "3", "phase": `"done"`, "status": "200", "target": `"db"`,
	}
	for k, v := range want {
		if got := string(res.Outputs[k].Raw); got != v {
			t.Errorf("outputs.%s = %s, want %s", k, got, v)
		}
	}
	// float64 would make it 9007199254740992.
	if got := string(res.Outputs["id"].Raw); !strings.Contains(got, "9007199254740993") {
		t.Errorf("outputs.id = %s, want 9007199254740993 kept", got)
	}
	if len(res.Outputs) != 8 {
		t.Errorf("outputs %v", res.Outputs)
	}
}

func TestSuccessConditionBodyTypes(t *testing.T) {
	tests := []struct {
		name        string
		contentType string
		body        string
		cond        string
	}{
		{"text stays a string", "text/plain", `{"state":"done"}`, `response.body == '{"state":"done"}'`},
		{"json suffix parsed", "application/problem+json", `{"state":"done"}`, "response.body.state == 'done'"},
		{"bad json stays a string", "application/json", `{"state":`, `response.body == '{"state":'`},
		{"json list", "application/json", `[1,2]`, "response.body == [1, 2]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				_, _ = io.WriteString(w, tt.body)
			})
			h := newHarness(t, Options{})
			a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL, SuccessCondition: tt.cond})
			wantResult(t, newStepRun(t, a, newRun("uid-1"), false, nil).execNow(), steps.Succeeded, false)
		})
	}
}

func TestSuccessConditionFalseOrBroken(t *testing.T) {
	srv := newServer(t, jsonHandler(http.StatusOK, `{"state":"pending"}`))
	h := newHarness(t, Options{})

	a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL, SuccessCondition: "response.body.state == 'done'"})
	wantResult(t, newStepRun(t, a, newRun("uid-1"), false, nil).execNow(), steps.Failed, true,
		"200 OK: successCondition is false: response.body.state == 'done'")

	a = h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL, SuccessCondition: "response.body.missing == 'x'"})
	wantResult(t, newStepRun(t, a, newRun("uid-2"), false, nil).execNow(), steps.Failed, false, "200 OK: successCondition:", "missing")

	// A 404 may be success.
	srv404 := newServer(t, jsonHandler(http.StatusNotFound, `{}`))
	a = h.compile("call", false, v1alpha1.HTTPStep{URL: srv404.URL, SuccessCondition: "response.status in [200, 404]"})
	wantResult(t, newStepRun(t, a, newRun("uid-3"), false, nil).execNow(), steps.Succeeded, false, "404 Not Found")

	// An output that fails fails the step.
	a = h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL, Outputs: map[string]v1alpha1.Expression{"x": "response.body.missing"}})
	wantResult(t, newStepRun(t, a, newRun("uid-4"), false, nil).execNow(), steps.Failed, false, "outputs.x")
}

// A 503 or 429 is transient whatever its body: a successCondition that reads a field the error
// body lacks must not turn it into a permanent failure.
func TestTransientStatusWithSuccessConditionOverBody(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
	}{
		{"503 json error", http.StatusServiceUnavailable, "application/json", `{"error":"overloaded"}`},
		{"503 html", http.StatusServiceUnavailable, "text/html", "<html>Service Unavailable</html>"},
		{"429 json", http.StatusTooManyRequests, "application/json", `{"error":"slow down"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			h := newHarness(t, Options{})
			a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL, SuccessCondition: "response.body.state == 'done'"})
			res := newStepRun(t, a, newRun("uid-1"), false, nil).execNow()
			if res.Outcome != steps.Failed || !res.Retryable {
				t.Errorf("BUG: a %d with a successCondition over the body gives %s retryable=%v (%q), want a retryable failure: "+
					"evaluate fails at once when the condition errors, before it looks at the status",
					tt.status, outcome(res.Outcome), res.Retryable, res.Message)
			}
		})
	}
}

func TestStatusCodes(t *testing.T) {
	date := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name       string
		status     int
		retryAfter string
		body       string
		retryable  bool
		min, max   time.Duration // RetryAfter
		parts      []string
	}{
		{"503", http.StatusServiceUnavailable, "", "try later", true, 0, 0, []string{"503 Service Unavailable: try later"}},
		{"500", http.StatusInternalServerError, "", "boom", true, 0, 0, []string{"500 Internal Server Error: boom"}},
		{"502", http.StatusBadGateway, "", "", true, 0, 0, []string{"502 Bad Gateway"}},
		{"503 retry after", http.StatusServiceUnavailable, "120", "", true, 2 * time.Minute, 2 * time.Minute, nil},
		{"429 seconds", http.StatusTooManyRequests, "7", "slow down", true, 7 * time.Second, 7 * time.Second, []string{"429 Too Many Requests: slow down"}},
		{"429 date", http.StatusTooManyRequests, date, "", true, 28 * time.Second, 30 * time.Second, nil},
		{"429 bad header", http.StatusTooManyRequests, "soon", "", true, 0, 0, nil},
		{"400", http.StatusBadRequest, "", `{"error": "bad input",` + "\n" + `"field": "name"}`, false, 0, 0,
			[]string{`400 Bad Request: {"error": "bad input", "field": "name"}`}},
		{"404", http.StatusNotFound, "", "no such thing", false, 0, 0, []string{"404 Not Found: no such thing"}},
		{"409", http.StatusConflict, "", "", false, 0, 0, []string{"409 Conflict"}},
		{"501", http.StatusNotImplemented, "", "nope", false, 0, 0, []string{"501 Not Implemented: nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			h := newHarness(t, Options{AllowedDestinations: []Destination{srv.dest(t)}})
			a := h.compile("call", true, v1alpha1.HTTPStep{URL: srv.URL + "/op"})
			r := newStepRun(t, a, newRun("uid-1"), true, nil)
			res := r.execNow()
			wantResult(t, res, steps.Failed, tt.retryable, append(tt.parts, "GET "+srv.URL+"/op: ")...)
			if res.RetryAfter < tt.min || res.RetryAfter > tt.max {
				t.Errorf("RetryAfter %s, want %s to %s", res.RetryAfter, tt.min, tt.max)
			}
			if res.State[stateRequests] != "1" {
				t.Errorf("state %v", res.State)
			}
			// The next attempt sends a new request.
			res = r.execNow()
			wantResult(t, res, steps.Failed, tt.retryable)
			if n := srv.count(); n != 2 {
				t.Errorf("server saw %d requests after two attempts, want 2", n)
			}
			if res.State[stateRequests] != "2" {
				t.Errorf("state %v, want requests 2", res.State)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{"7", 7 * time.Second},
		{"86400", 24 * time.Hour},
		{"999999999999", 24 * time.Hour},
		{"soon", 0},
		{"1.5", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Add(48 * time.Hour).Format(http.TimeFormat), 24 * time.Hour},
		{now.Add(time.Minute).Format(time.RFC850), time.Minute},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.in, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// slowHandler answers after d, or gives up when the client does.
func slowHandler(d time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(d):
		}
		_, _ = io.WriteString(w, "late")
	}
}

func TestRequestTimeoutInline(t *testing.T) {
	srv := newServer(t, slowHandler(time.Second))
	h := newHarness(t, Options{InlineWait: 3 * time.Second})
	a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL, Timeout: dur(200 * time.Millisecond)})
	r := newStepRun(t, a, newRun("uid-1"), false, nil)
	start := time.Now()
	res := r.execNow()
	if el := time.Since(start); el > 900*time.Millisecond {
		t.Errorf("Execute took %s with a 200ms request timeout", el)
	}
	wantResult(t, res, steps.Failed, true, "GET "+srv.URL+": no response within the request timeout of 200ms")
	if res.State[stateRequests] != "1" {
		t.Errorf("state %v", res.State)
	}
	h.noWake()
}

func TestRequestTimeoutAfterInlineWait(t *testing.T) {
	srv := newServer(t, slowHandler(time.Second))
	h := newHarness(t, Options{InlineWait: 30 * time.Millisecond})
	a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL, Timeout: dur(200 * time.Millisecond)})
	run := newRun("uid-1")
	r := newStepRun(t, a, run, false, nil)
	res := r.execNow()
	wantResult(t, res, steps.InProgress, false, "GET "+srv.URL+": waiting for the response (sent ")
	if res.CheckAfter != 1200*time.Millisecond {
		t.Errorf("CheckAfter %s, want the request timeout and a second", res.CheckAfter)
	}
	if res.State != nil {
		t.Errorf("state %v while the request is in flight, want unchanged", res.State)
	}
	h.waitWake(run)
	res = r.execNow()
	wantResult(t, res, steps.Failed, true, "no response within the request timeout of 200ms")
	if res.State[stateRequests] != "1" {
		t.Errorf("state %v", res.State)
	}
	if n := srv.count(); n != 1 {
		t.Errorf("server saw %d requests, want 1: the outcome of the first is used", n)
	}
}

func TestSlowResponseAfterInlineWait(t *testing.T) {
	srv := newServer(t, slowHandler(150*time.Millisecond))
	h := newHarness(t, Options{InlineWait: 20 * time.Millisecond})
	a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL})
	run := newRun("uid-1")
	r := newStepRun(t, a, run, false, nil)
	wantResult(t, r.execNow(), steps.InProgress, false, "waiting for the response")
	// Executed again before the response: still waiting, no second request.
	wantResult(t, r.execNow(), steps.InProgress, false, "waiting for the response")
	h.waitWake(run)
	wantResult(t, r.execNow(), steps.Succeeded, false, "200 OK")
	if n := srv.count(); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestBodyReadTimeout(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	})
	h := newHarness(t, Options{})
	a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL, Timeout: dur(200 * time.Millisecond)})
	wantResult(t, newStepRun(t, a, newRun("uid-1"), false, nil).execNow(), steps.Failed, true,
		"GET "+srv.URL+": 200 OK: the response body did not end within the request timeout of 200ms (7 bytes read)")
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	h := newHarness(t, Options{})
	a := h.compile("call", false, v1alpha1.HTTPStep{URL: "http://" + addr + "/x"})
	res := newStepRun(t, a, newRun("uid-1"), false, nil).execNow()
	wantResult(t, res, steps.Failed, true, "GET http://"+addr+"/x: ", "connection refused")
	if strings.Contains(res.Message, `Get "`) {
		t.Errorf("message %q repeats the URL error's prefix", res.Message)
	}
}

func TestPoll(t *testing.T) {
	var mu sync.Mutex
	state := "pending"
	srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"state":%q,"id":"snap-1"}`, state)
	})
	h := newHarness(t, Options{AllowedDestinations: []Destination{srv.dest(t)}})
	a := h.compile("call", true, v1alpha1.HTTPStep{
		URL:              srv.URL + "/snapshots/1",
		SuccessCondition: "response.body.state == 'done'",
		Outputs:          map[string]v1alpha1.Expression{"id": "response.body.id"},
		Poll:             &v1alpha1.HTTPPoll{Interval: metav1.Duration{Duration: time.Second}},
	})
	r := newStepRun(t, a, newRun("uid-1"), true, nil)
	t0 := time.Now()

	res := r.exec(t0)
	wantResult(t, res, steps.InProgress, false, "200 OK; successCondition is false after 1 requests; asking again every 1s")
	if res.CheckAfter != time.Second {
		t.Errorf("CheckAfter %s, want 1s", res.CheckAfter)
	}
	if want := t0.Add(time.Second).UTC().Format(time.RFC3339Nano); res.State[stateNextRequest] != want || res.State[stateRequests] != "1" {
		t.Errorf("state %v, want requests 1 and nextRequestAt %s", res.State, want)
	}
	if srv.count() != 1 {
		t.Fatalf("server saw %d requests, want 1", srv.count())
	}

	// Woken early: no request.
	res = r.exec(t0.Add(400 * time.Millisecond))
	wantResult(t, res, steps.InProgress, false, "asking again every 1s")
	if res.CheckAfter != 600*time.Millisecond {
		t.Errorf("early CheckAfter %s, want 600ms", res.CheckAfter)
	}
	if res.State != nil {
		t.Errorf("early execution changed the state to %v", res.State)
	}
	if n := srv.count(); n != 1 {
		t.Errorf("an early execution sent a request (%d in all)", n)
	}

	// Due: the second request.
	res = r.exec(t0.Add(time.Second))
	wantResult(t, res, steps.InProgress, false, "after 2 requests")
	if want := t0.Add(2 * time.Second).UTC().Format(time.RFC3339Nano); res.State[stateNextRequest] != want || res.State[stateRequests] != "2" {
		t.Errorf("state %v, want requests 2 and nextRequestAt %s", res.State, want)
	}
	if n := srv.count(); n != 2 {
		t.Errorf("server saw %d requests, want 2", n)
	}

	mu.Lock()
	state = "done"
	mu.Unlock()
	res = r.exec(t0.Add(2 * time.Second))
	wantResult(t, res, steps.Succeeded, false, "200 OK")
	if _, ok := res.State[stateNextRequest]; ok || res.State[stateRequests] != "3" {
		t.Errorf("state %v, want requests 3 and no nextRequestAt", res.State)
	}
	if got := string(res.Outputs["id"].Raw); got != `"snap-1"` {
		t.Errorf("outputs.id = %s", got)
	}
	if n := srv.count(); n != 3 {
		t.Errorf("server saw %d requests, want 3", n)
	}
}

// While polling, a 2xx whose body the condition cannot read yet (the field appears when the work
// is done) is polled again, not failed.
func TestPollConditionNotYetEvaluable(t *testing.T) {
	var mu sync.Mutex
	body := `{"progress":10}`
	srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	})
	h := newHarness(t, Options{})
	a := h.compile("call", false, v1alpha1.HTTPStep{
		URL: srv.URL, SuccessCondition: "response.body.state == 'done'",
		Poll: &v1alpha1.HTTPPoll{Interval: metav1.Duration{Duration: 2 * time.Second}},
	})
	r := newStepRun(t, a, newRun("uid-1"), false, nil)
	t0 := time.Now()
	res := r.exec(t0)
	wantResult(t, res, steps.InProgress, false, "successCondition cannot be evaluated yet", "no such key: state", "asking again every 2s")
	if res.CheckAfter != 2*time.Second || res.State[stateNextRequest] == "" {
		t.Errorf("CheckAfter %s, state %v", res.CheckAfter, res.State)
	}
	mu.Lock()
	body = `{"state":"done"}`
	mu.Unlock()
	wantResult(t, r.exec(t0.Add(2*time.Second)), steps.Succeeded, false)
	if n := srv.count(); n != 2 {
		t.Errorf("server saw %d requests, want 2", n)
	}
}

func TestPollNon2xxFails(t *testing.T) {
	srv := newServer(t, jsonHandler(http.StatusBadRequest, `{"state":"pending"}`))
	h := newHarness(t, Options{})
	a := h.compile("call", false, v1alpha1.HTTPStep{
		URL: srv.URL, SuccessCondition: "response.body.state == 'done'",
		Poll: &v1alpha1.HTTPPoll{Interval: metav1.Duration{Duration: time.Second}},
	})
	wantResult(t, newStepRun(t, a, newRun("uid-1"), false, nil).execNow(), steps.Failed, false, "400 Bad Request")
}

func TestIdempotencyKey(t *testing.T) {
	srv := newServer(t, jsonHandler(http.StatusServiceUnavailable, ""))
	h := newHarness(t, Options{})
	spec := v1alpha1.HTTPStep{URL: srv.URL, Method: http.MethodPost}
	runA, runB := newRun("uid-a"), newRun("uid-b")
	first := newStepRun(t, h.compile("first", false, spec), runA, false, nil)
	for i := 0; i < 3; i++ {
		wantResult(t, first.execNow(), steps.Failed, true)
	}
	wantResult(t, newStepRun(t, h.compile("second", false, spec), runA, false, nil).execNow(), steps.Failed, true)
	wantResult(t, newStepRun(t, h.compile("first", false, spec), runB, false, nil).execNow(), steps.Failed, true)
	custom := spec
	custom.Headers = []v1alpha1.HTTPHeader{{Name: "idempotency-key", Value: "mine-${object.metadata.name}"}}
	wantResult(t, newStepRun(t, h.compile("custom", false, custom), runA, false, nil).execNow(), steps.Failed, true)

	var keys []string
	for _, s := range srv.seen() {
		if v := s.header.Values(HeaderIdempotencyKey); len(v) != 1 {
			t.Errorf("request has Idempotency-Key %q, want one value", v)
		}
		keys = append(keys, s.header.Get(HeaderIdempotencyKey))
	}
	if len(keys) != 6 {
		t.Fatalf("server saw %d requests, want 6", len(keys))
	}
	// The key names the deletion (target UID and policy), not the TeardownRun: a run that is
	// never recorded, or recorded after its first pass, sends the same key.
	idA := naming.DeletionID("TeardownPolicy", "ns", "p", "uid-a")
	want := IdempotencyKey(idA, "first", 0)
	if want != "uid-a-"+naming.Hash("TeardownPolicy", "ns", "p")+"-first" {
		t.Errorf("IdempotencyKey = %q", want)
	}
	for i := 0; i < 3; i++ {
		if keys[i] != want {
			t.Errorf("request %d has key %q, want %q", i, keys[i], want)
		}
	}
	if keys[3] == want || keys[3] != IdempotencyKey(idA, "second", 0) {
		t.Errorf("another step has key %q", keys[3])
	}
	if keys[4] == want || keys[4] != IdempotencyKey(naming.DeletionID("TeardownPolicy", "ns", "p", "uid-b"), "first", 0) {
		t.Errorf("another run has key %q", keys[4])
	}
	if keys[5] != "mine-db" {
		t.Errorf("a step's own Idempotency-Key was replaced by %q", keys[5])
	}
	// A retry of the run after a failure was fixed gets a key of its own.
	retried := newRun("uid-a")
	retried.Status.Retries = 2
	wantResult(t, newStepRun(t, h.compile("first", false, spec), retried, false, nil).execNow(), steps.Failed, true)
	seen := srv.seen()
	if got := seen[len(seen)-1].header.Get(HeaderIdempotencyKey); got != want+"-r2" || got != IdempotencyKey(idA, "first", 2) {
		t.Errorf("after 2 retries of the run, the key is %q, want %s-r2", got, want)
	}
}

func TestNoCredentialsUnlessNamed(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "abc123", Path: "/"})
		w.Header().Set("Www-Authenticate", `Basic realm="x"`)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	h := newHarness(t, Options{})
	r := newStepRun(t, h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL, Headers: []v1alpha1.HTTPHeader{{Name: "X-Trace", Value: "t-1"}}}), newRun("uid-1"), false, nil)
	for i := 0; i < 2; i++ {
		wantResult(t, r.execNow(), steps.Failed, true)
	}
	got := srv.seen()
	if len(got) != 2 {
		t.Fatalf("server saw %d requests", len(got))
	}
	for i, s := range got {
		for _, name := range []string{"Authorization", "Proxy-Authorization", "Cookie"} {
			if v, ok := s.header[name]; ok {
				t.Errorf("request %d carries %s: %q", i, name, v)
			}
		}
		if s.header.Get("X-Trace") != "t-1" {
			t.Errorf("request %d lacks the step's header: %v", i, s.header)
		}
	}
}

func TestRequestBodies(t *testing.T) {
	srv := newServer(t, jsonHandler(http.StatusOK, "{}"))
	h := newHarness(t, Options{})
	tests := []struct {
		name        string
		spec        v1alpha1.HTTPStep
		body        string
		contentType string
	}{
		{"none", v1alpha1.HTTPStep{Method: http.MethodDelete}, "", ""},
		{"template", v1alpha1.HTTPStep{Method: http.MethodPost, Body: "name=${object.metadata.name}&n=${object.n}&lit=$${x}",
			Headers: []v1alpha1.HTTPHeader{{Name: "Content-Type", Value: "application/x-www-form-urlencoded"}}},
			"name=db&n=3&lit=${x}", "application/x-www-form-urlencoded"},
		{"template without content type", v1alpha1.HTTPStep{Method: http.MethodPut, Body: "plain ${object.metadata.name}"}, "plain db", ""},
		{"json", v1alpha1.HTTPStep{Method: http.MethodPost, JSONBody: "{'reason': 'teardown', 'name': object.metadata.name, 'n': object.n, 'tags': ['a', 'b']}"},
			`{"n":3,"name":"db","reason":"teardown","tags":["a","b"]}`, "application/json"},
		{"json with own content type", v1alpha1.HTTPStep{Method: http.MethodPatch, JSONBody: "{'spec': {'replicas': 0}}",
			Headers: []v1alpha1.HTTPHeader{{Name: "content-type", Value: "application/merge-patch+json"}}},
			`{"spec":{"replicas":0}}`, "application/merge-patch+json"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.URL = srv.URL + "/" + strconv.Itoa(i)
			r := newStepRun(t, h.compile("call", false, spec), newRun("uid-"+strconv.Itoa(i)), false, map[string]any{"n": int64(3)})
			wantResult(t, r.execNow(), steps.Succeeded, false)
			var got *seen
			for _, s := range srv.seen() {
				if s.path == "/"+strconv.Itoa(i) {
					got = &s
				}
			}
			if got == nil {
				t.Fatalf("no request")
			}
			if got.method != spec.Method {
				t.Errorf("method %s, want %s", got.method, spec.Method)
			}
			if got.body != tt.body {
				t.Errorf("body %q, want %q", got.body, tt.body)
			}
			if ct := got.header.Get("Content-Type"); ct != tt.contentType {
				t.Errorf("Content-Type %q, want %q", ct, tt.contentType)
			}
		})
	}
}

func TestRedirects(t *testing.T) {
	other := newServer(t, jsonHandler(http.StatusOK, "{}"))
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/old":
			http.Redirect(w, r, "/new?x=1", http.StatusFound)
		case "/post":
			http.Redirect(w, r, "/new", http.StatusTemporaryRedirect)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/away":
			http.Redirect(w, r, other.URL+"/new", http.StatusFound)
		case "/metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/new":
			_, _ = io.WriteString(w, "new")
		}
	})
	paths := func() []string {
		var out []string
		for _, s := range srv.seen() {
			out = append(out, s.method+" "+s.path+" "+s.body)
		}
		return out
	}
	h := newHarness(t, Options{AllowedDestinations: []Destination{srv.dest(t), other.dest(t)}})
	for _, namespaced := range []bool{false, true} {
		t.Run(fmt.Sprintf("namespaced=%v", namespaced), func(t *testing.T) {
			run := func(path string, follow bool, body string) steps.Result {
				t.Helper()
				spec := v1alpha1.HTTPStep{URL: srv.URL + path, FollowRedirects: follow}
				if body != "" {
					spec.Method, spec.Body = http.MethodPost, body
				}
				return newStepRun(t, h.compile("call", namespaced, spec), newRun("uid-"+path), namespaced, nil).execNow()
			}
			before := srv.count()
			wantResult(t, run("/old", false, ""), steps.Failed, false, "302 Found: redirect to /new?x=1 not followed", "followRedirects")
			if got := paths()[before:]; len(got) != 1 {
				t.Errorf("requests %q, want only /old", got)
			}

			before = srv.count()
			wantResult(t, run("/old", true, ""), steps.Succeeded, false, "GET "+srv.URL+"/old: 200 OK")
			if got := paths()[before:]; strings.Join(got, ",") != "GET /old ,GET /new?x=1 " {
				t.Errorf("requests %q", got)
			}

			before = srv.count()
			wantResult(t, run("/post", true, "payload"), steps.Succeeded, false)
			if got := paths()[before:]; strings.Join(got, ",") != "POST /post payload,POST /new payload" {
				t.Errorf("requests %q, want the body sent again after a 307", got)
			}

			wantResult(t, run("/loop", true, ""), steps.Failed, false, "stopped after 5 redirects")

			otherBefore := other.count()
			wantResult(t, run("/away", true, ""), steps.Failed, false,
				"redirect to "+other.URL+"/new refused: redirects are followed only to the same scheme, host and port as http://"+srv.addr())
			if n := other.count(); n != otherBefore {
				t.Errorf("the other server got %d requests", n-otherBefore)
			}
		})
	}
	h2 := newHarness(t, Options{AllowedDestinations: []Destination{srv.dest(t)}})
	res := newStepRun(t, h2.compile("call", true, v1alpha1.HTTPStep{URL: srv.URL + "/metadata", FollowRedirects: true}), newRun("uid-m"), true, nil).execNow()
	wantResult(t, res, steps.Failed, false, "redirect to http://169.254.169.254/latest/meta-data/", "refused", "link-local")
}

// The API promises up to 5 redirects: a chain of exactly 5 must be followed.
func TestRedirectLimit(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r"))
		if n == 0 {
			_, _ = io.WriteString(w, "end")
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/r%d", n-1), http.StatusFound)
	})
	h := newHarness(t, Options{})
	a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL + "/r6", FollowRedirects: true})
	wantResult(t, newStepRun(t, a, newRun("uid-6"), false, nil).execNow(), steps.Failed, false, "stopped after 5 redirects")
	a = h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL + "/r4", FollowRedirects: true})
	wantResult(t, newStepRun(t, a, newRun("uid-4"), false, nil).execNow(), steps.Succeeded, false)
	a = h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL + "/r5", FollowRedirects: true})
	if res := newStepRun(t, a, newRun("uid-5"), false, nil).execNow(); res.Outcome != steps.Succeeded {
		t.Errorf("BUG: a chain of 5 redirects gives %q, want it followed (followRedirects \"follows up to 5 redirects\"): "+
			"checkRedirect stops when len(via) >= 5, that is at the 5th redirect", res.Message)
	}
}

func TestResponseBodyLimit(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := MaxBodyBytes
		if r.URL.Path == "/big" {
			n++
		}
		_, _ = w.Write([]byte(strings.Repeat("x", n)))
	})
	h := newHarness(t, Options{})
	res := newStepRun(t, h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL + "/big"}), newRun("uid-1"), false, nil).execNow()
	wantResult(t, res, steps.Failed, false, "GET "+srv.URL+"/big: 200 OK: the response body is larger than 1048576 bytes (1 MiB), the most a step reads")
	res = newStepRun(t, h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL + "/fits", SuccessCondition: "size(response.body) == 1048576"}),
		newRun("uid-2"), false, nil).execNow()
	wantResult(t, res, steps.Succeeded, false)
}

func TestNamespacedDestinations(t *testing.T) {
	allowed := newServer(t, jsonHandler(http.StatusOK, "{}"))
	forbidden := newServer(t, jsonHandler(http.StatusOK, "{}"))
	h := newHarness(t, Options{AllowedDestinations: []Destination{allowed.dest(t)}})
	object := func(port int64, host string) map[string]any { return map[string]any{"port": port, "host": host} }

	t.Run("allowed", func(t *testing.T) {
		a := h.compile("call", true, v1alpha1.HTTPStep{URL: "http://127.0.0.1:${string(object.port)}/"})
		wantResult(t, newStepRun(t, a, newRun("uid-1"), true, object(allowed.port(), "")).execNow(), steps.Succeeded, false)
	})
	t.Run("templated loopback", func(t *testing.T) {
		a := h.compile("call", true, v1alpha1.HTTPStep{URL: "http://127.0.0.1:${string(object.port)}/"})
		res := newStepRun(t, a, newRun("uid-2"), true, object(forbidden.port(), "")).execNow()
		wantResult(t, res, steps.Failed, false, "refused", "loopback", "--http-allowed-destinations")
	})
	t.Run("templated metadata", func(t *testing.T) {
		a := h.compile("call", true, v1alpha1.HTTPStep{URL: "http://${object.host}/latest/meta-data/"})
		res := newStepRun(t, a, newRun("uid-3"), true, object(0, "169.254.169.254")).execNow()
		wantResult(t, res, steps.Failed, false, "refused", "link-local")
	})
	t.Run("templated metadata name", func(t *testing.T) {
		a := h.compile("call", true, v1alpha1.HTTPStep{URL: "http://${object.host}/"})
		res := newStepRun(t, a, newRun("uid-3b"), true, object(0, "metadata.google.internal")).execNow()
		wantResult(t, res, steps.Failed, false, "refused", "cloud metadata host name")
	})
	t.Run("localhost", func(t *testing.T) {
		a := h.compile("call", true, v1alpha1.HTTPStep{URL: fmt.Sprintf("http://localhost:%d/", forbidden.port())})
		res := newStepRun(t, a, newRun("uid-4"), true, nil).execNow()
		wantResult(t, res, steps.Failed, false, "refused", "loopback")
	})
	t.Run("cluster policy", func(t *testing.T) {
		a := h.compile("call", false, v1alpha1.HTTPStep{URL: forbidden.URL + "/cluster"})
		wantResult(t, newStepRun(t, a, newRun("uid-5"), false, nil).execNow(), steps.Succeeded, false)
		a = h.compile("call", false, v1alpha1.HTTPStep{URL: fmt.Sprintf("http://localhost:%d/cluster", forbidden.port())})
		wantResult(t, newStepRun(t, a, newRun("uid-6"), false, nil).execNow(), steps.Succeeded, false)
	})
	for _, s := range forbidden.seen() {
		if s.path != "/cluster" {
			t.Errorf("a TeardownPolicy reached the forbidden server: %s %s", s.method, s.path)
		}
	}
	if n := forbidden.count(); n != 2 {
		t.Errorf("forbidden server saw %d requests, want the cluster policy's 2", n)
	}

	for _, tt := range []struct{ url, want string }{
		{forbidden.URL + "/", "loopback"},
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"http://[fe80::1%25eth0]/", "link-local"},
		{"http://[::ffff:127.0.0.1]:80/", "loopback"},
		{"http://metadata.google.internal/", "cloud metadata host name"},
		{"https://kubernetes.default.svc.cluster.local/api", "the cluster's API server"},
		{"http://10.1.2.3/", "private address"},
	} {
		t.Run("literal "+tt.url, func(t *testing.T) {
			_, errs := h.compileErrs("call", true, v1alpha1.HTTPStep{URL: tt.url})
			if len(errs) != 1 || errs[0].Field != "spec.steps[0].http.url" || !strings.Contains(errs[0].Detail, tt.want) || !strings.Contains(errs[0].Detail, "refused") {
				t.Errorf("Compile errors %v, want one on spec.steps[0].http.url saying %q", errs, tt.want)
			}
			if _, errs := h.compileErrs("call", false, v1alpha1.HTTPStep{URL: tt.url}); len(errs) != 0 {
				t.Errorf("cluster policy: Compile errors %v", errs)
			}
		})
	}
}

// A rendered URL's password must not reach the status when the destination is refused.
func TestRefusedURLPasswordRedacted(t *testing.T) {
	h := newHarness(t, Options{})
	a := h.compile("call", true, v1alpha1.HTTPStep{URL: "http://user:pa55word-x@127.0.0.1:${string(object.port)}/"})
	res := newStepRun(t, a, newRun("uid-1"), true, map[string]any{"port": int64(8080)}).execNow()
	wantResult(t, res, steps.Failed, false, "refused")
	if strings.Contains(res.Message, "pa55word-x") {
		t.Errorf("BUG: message %q quotes the URL's password: prepare formats the raw URL instead of its redacted form", res.Message)
	}
}

func TestURLPasswordRedactedInMessages(t *testing.T) {
	srv := newServer(t, jsonHandler(http.StatusBadRequest, "nope"))
	h := newHarness(t, Options{})
	a := h.compile("call", false, v1alpha1.HTTPStep{URL: "http://user:pa55word-x@" + srv.addr() + "/x"})
	res := newStepRun(t, a, newRun("uid-1"), false, nil).execNow()
	wantResult(t, res, steps.Failed, false, "GET http://user:xxxxx@"+srv.addr()+"/x: 400 Bad Request")
	if strings.Contains(res.Message, "pa55word") {
		t.Errorf("message %q quotes the password", res.Message)
	}
	if got := srv.seen()[0].header.Get("Authorization"); got == "" {
		t.Errorf("the URL's credentials were not sent")
	}
}

func TestResolverUsedForNamespacedRequests(t *testing.T) {
	srv := newServer(t, jsonHandler(http.StatusOK, "{}"))
	forbidden, conns := countingServer(t)
	ap := serverAddrPort(t, srv.Server)
	res := &staticResolver{addrs: map[string][]netip.Addr{
		"api.example":  {ap.Addr()},
		"evil.example": {netip.MustParseAddr("127.0.0.1")},
	}}
	h := newHarness(t, Options{AllowedDestinations: []Destination{srv.dest(t)}, Resolver: res})
	a := h.compile("call", true, v1alpha1.HTTPStep{URL: fmt.Sprintf("http://api.example:%d/", ap.Port())})
	wantResult(t, newStepRun(t, a, newRun("uid-1"), true, nil).execNow(), steps.Succeeded, false)
	if got := res.lookups(); len(got) != 1 || got[0] != "ip api.example" {
		t.Errorf("lookups %q, want one of api.example", got)
	}
	if host := srv.seen()[0].header.Get("X-Forwarded-Host"); host != "" {
		t.Errorf("unexpected X-Forwarded-Host %q", host)
	}

	a = h.compile("call", true, v1alpha1.HTTPStep{URL: strings.Replace(forbidden.URL, "127.0.0.1", "evil.example", 1)})
	wantResult(t, newStepRun(t, a, newRun("uid-2"), true, nil).execNow(), steps.Failed, false,
		"destination evil.example (127.0.0.1) refused for a TeardownPolicy: loopback address")
	if n := conns.Load(); n != 0 {
		t.Errorf("the forbidden server accepted %d connections", n)
	}
}

func TestDNSRebindingThroughTheClient(t *testing.T) {
	forbidden, conns := countingServer(t)
	res := &rebindingResolver{}
	h := newHarness(t, Options{Resolver: res})
	a := h.compile("call", true, v1alpha1.HTTPStep{
		URL:     strings.Replace(forbidden.URL, "127.0.0.1", "rebind.example", 1),
		Timeout: dur(300 * time.Millisecond),
	})
	r := newStepRun(t, a, newRun("uid-1"), true, nil)
	first := r.execNow()
	wantResult(t, first, steps.Failed, true) // 192.0.2.1 does not answer
	if n := res.calls.Load(); n != 1 {
		t.Errorf("one request looked the name up %d times", n)
	}
	wantResult(t, r.execNow(), steps.Failed, false, "refused", "loopback")
	if n := res.calls.Load(); n != 2 {
		t.Errorf("two requests looked the name up %d times", n)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the loopback server accepted %d connections", n)
	}
}

func TestSecretsRedacted(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		token := strings.TrimPrefix(auth, "Bearer ")
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusBadRequest)
		}
		_, _ = fmt.Fprintf(w, `{"error":"invalid credentials %s","token":%q,"nested":{"list":[%q]}}`, auth, token, "token="+token)
	})
	h := newHarness(t, Options{})
	headers := []v1alpha1.HTTPHeader{{Name: "authorization", Value: "Bearer s3cr3t-token"}}

	a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL + "/bad", Headers: headers})
	res := newStepRun(t, a, newRun("uid-1"), false, nil).execNow()
	wantResult(t, res, steps.Failed, false, "400 Bad Request", "[redacted]")
	if strings.Contains(res.Message, "s3cr3t") {
		t.Errorf("message %q leaks the token", res.Message)
	}

	a = h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL + "/ok", Headers: headers,
		Outputs: map[string]v1alpha1.Expression{"token": "response.body.token", "nested": "response.body.nested", "error": "response.body.error"}})
	res = newStepRun(t, a, newRun("uid-2"), false, nil).execNow()
	wantResult(t, res, steps.Succeeded, false)
	want := map[string]string{"token": `"[redacted]"`, "nested": `{"list":["token=[redacted]"]}`, "error": `"invalid credentials [redacted]"`}
	for k, v := range want {
		if got := string(res.Outputs[k].Raw); got != v {
			t.Errorf("outputs.%s = %s, want %s", k, got, v)
		}
	}

	a = h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL + "/ok", Headers: headers, SuccessCondition: "response.body.token == 'other'"})
	res = newStepRun(t, a, newRun("uid-3"), false, nil).execNow()
	wantResult(t, res, steps.Failed, true, "successCondition is false")
	if strings.Contains(res.Message, "s3cr3t") {
		t.Errorf("message %q leaks the token", res.Message)
	}

	for i, s := range srv.seen() {
		if got := s.header.Get("Authorization"); got != "Bearer s3cr3t-token" {
			t.Errorf("request %d: Authorization %q", i, got)
		}
	}
}

// A sensitive header's value is not quoted in a Compile error either.
func TestCompileErrorRedactsSensitiveHeader(t *testing.T) {
	h := newHarness(t, Options{})
	_, errs := h.compileErrs("call", false, v1alpha1.HTTPStep{URL: "https://api.example/", Headers: []v1alpha1.HTTPHeader{{Name: "X-Api-Key", Value: "k3y-value-${"}}})
	if len(errs) != 1 || errs[0].Field != "spec.steps[0].http.headers[0].value" || errs[0].BadValue != redacted {
		t.Fatalf("Compile errors %v, want one on headers[0].value with the value redacted", errs)
	}
	if strings.Contains(errs.ToAggregate().Error(), "k3y-value") {
		t.Errorf("BUG: Compile error %q quotes the sensitive value: BadValue is redacted, but the detail "+
			"(the template error, which quotes its source) is not", errs.ToAggregate())
	}
}

// A server may echo a credential anywhere, also in the status line's reason phrase.
func TestSecretInStatusLineRedacted(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = buf.WriteString("HTTP/1.1 401 " + r.Header.Get("Authorization") + "\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno")
		_ = buf.Flush()
	})
	h := newHarness(t, Options{})
	a := h.compile("call", false, v1alpha1.HTTPStep{URL: srv.URL, Headers: []v1alpha1.HTTPHeader{{Name: "Authorization", Value: "Bearer s3cr3t-token"}}})
	res := newStepRun(t, a, newRun("uid-1"), false, nil).execNow()
	wantResult(t, res, steps.Failed, false, "401")
	if strings.Contains(res.Message, "s3cr3t") {
		t.Errorf("BUG: message %q quotes the token from the status line: evaluate formats x.line without the redactor", res.Message)
	}
}

func TestMaxInFlight(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	h := newHarness(t, Options{MaxInFlight: 1, InlineWait: 20 * time.Millisecond})
	run := newRun("uid-1")
	first := newStepRun(t, h.compile("first", false, v1alpha1.HTTPStep{URL: srv.URL}), run, false, nil)
	second := newStepRun(t, h.compile("second", false, v1alpha1.HTTPStep{URL: srv.URL}), run, false, nil)
	wantResult(t, first.execNow(), steps.InProgress, false, "waiting for the response")
	res := second.execNow()
	wantResult(t, res, steps.InProgress, false, "waiting for one of the 1 requests in flight to end")
	if res.CheckAfter != time.Second {
		t.Errorf("CheckAfter %s, want 1s", res.CheckAfter)
	}
	if n := srv.count(); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
	once.Do(func() { close(release) })
	h.waitWake(run)
	wantResult(t, first.execNow(), steps.Succeeded, false)
	h.kind.inlineWait = 5 * time.Second
	wantResult(t, second.execNow(), steps.Succeeded, false)
	if n := srv.count(); n != 2 {
		t.Errorf("server saw %d requests, want 2", n)
	}
}

func TestCompileErrors(t *testing.T) {
	const url = "https://api.example/v1"
	tests := []struct {
		name       string
		namespaced bool
		spec       v1alpha1.HTTPStep
		want       []string // "type field"
	}{
		{"duplicate header", false, v1alpha1.HTTPStep{URL: url, Headers: []v1alpha1.HTTPHeader{
			{Name: "X-Trace", Value: "a"}, {Name: "Accept", Value: "b"}, {Name: "x-trace", Value: "c"}}},
			[]string{"FieldValueDuplicate spec.steps[0].http.headers[2].name"}},
		{"forbidden Host", false, v1alpha1.HTTPStep{URL: url, Headers: []v1alpha1.HTTPHeader{{Name: "host", Value: "a"}}},
			[]string{"FieldValueForbidden spec.steps[0].http.headers[0].name"}},
		{"forbidden Content-Length", false, v1alpha1.HTTPStep{URL: url, Headers: []v1alpha1.HTTPHeader{{Name: "X-A", Value: "a"}, {Name: "Content-Length", Value: "1"}}},
			[]string{"FieldValueForbidden spec.steps[0].http.headers[1].name"}},
		{"value and valueFrom", false, v1alpha1.HTTPStep{URL: url, Headers: []v1alpha1.HTTPHeader{{Name: "X-A", Value: "a",
			ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: "s", Key: "k", Namespace: "ns"}}}}},
			[]string{"FieldValueInvalid spec.steps[0].http.headers[0]"}},
		{"valueFrom without secretKeyRef", false, v1alpha1.HTTPStep{URL: url, Headers: []v1alpha1.HTTPHeader{{Name: "X-A", ValueFrom: &v1alpha1.HeaderValueSource{}}}},
			[]string{"FieldValueRequired spec.steps[0].http.headers[0].valueFrom.secretKeyRef"}},
		{"bad header template", false, v1alpha1.HTTPStep{URL: url, Headers: []v1alpha1.HTTPHeader{{Name: "X-A", Value: "${object.}"}}},
			[]string{"FieldValueInvalid spec.steps[0].http.headers[0].value"}},
		{"poll without successCondition", false, v1alpha1.HTTPStep{URL: url, Poll: &v1alpha1.HTTPPoll{Interval: metav1.Duration{Duration: time.Minute}}},
			[]string{"FieldValueRequired spec.steps[0].http.successCondition"}},
		{"poll interval too short", false, v1alpha1.HTTPStep{URL: url, SuccessCondition: "true", Poll: &v1alpha1.HTTPPoll{Interval: metav1.Duration{Duration: 500 * time.Millisecond}}},
			[]string{"FieldValueInvalid spec.steps[0].http.poll.interval"}},
		{"bad output name", false, v1alpha1.HTTPStep{URL: url, Outputs: map[string]v1alpha1.Expression{"1st": "response.status", "ok_name": "response.status"}},
			[]string{"FieldValueInvalid spec.steps[0].http.outputs[1st]"}},
		{"bad output expression", false, v1alpha1.HTTPStep{URL: url, Outputs: map[string]v1alpha1.Expression{"x": "response."}},
			[]string{"FieldValueInvalid spec.steps[0].http.outputs[x]"}},
		{"too many outputs", false, v1alpha1.HTTPStep{URL: url, Outputs: func() map[string]v1alpha1.Expression {
			m := map[string]v1alpha1.Expression{}
			for i := 0; i < 17; i++ {
				m[fmt.Sprintf("o%d", i)] = "response.status"
			}
			return m
		}()}, []string{"FieldValueTooMany spec.steps[0].http.outputs"}},
		{"timeout 61s", false, v1alpha1.HTTPStep{URL: url, Timeout: dur(61 * time.Second)}, []string{"FieldValueInvalid spec.steps[0].http.timeout"}},
		{"timeout 0", false, v1alpha1.HTTPStep{URL: url, Timeout: dur(0)}, []string{"FieldValueInvalid spec.steps[0].http.timeout"}},
		{"body and jsonBody", false, v1alpha1.HTTPStep{URL: url, Body: "x", JSONBody: "{'a': 1}"}, []string{"FieldValueInvalid spec.steps[0].http.jsonBody"}},
		{"bad body", false, v1alpha1.HTTPStep{URL: url, Body: "${"}, []string{"FieldValueInvalid spec.steps[0].http.body"}},
		{"bad jsonBody", false, v1alpha1.HTTPStep{URL: url, JSONBody: "{'a': }"}, []string{"FieldValueInvalid spec.steps[0].http.jsonBody"}},
		{"successCondition not bool", false, v1alpha1.HTTPStep{URL: url, SuccessCondition: "response.status + 1"}, []string{"FieldValueInvalid spec.steps[0].http.successCondition"}},
		{"bad url template", false, v1alpha1.HTTPStep{URL: "https://${object.metadata.name"}, []string{"FieldValueInvalid spec.steps[0].http.url"}},
		{"bad scheme", false, v1alpha1.HTTPStep{URL: "ftp://files.example/x"}, []string{"FieldValueInvalid spec.steps[0].http.url"}},
		{"no host", false, v1alpha1.HTTPStep{URL: "http:///path"}, []string{"FieldValueInvalid spec.steps[0].http.url"}},
		{"cluster secret without namespace", false, v1alpha1.HTTPStep{URL: url, Headers: []v1alpha1.HTTPHeader{{Name: "Authorization",
			ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: "creds", Key: "token"}}}}},
			[]string{"FieldValueRequired spec.steps[0].http.headers[0].valueFrom.secretKeyRef.namespace"}},
		{"namespaced secret in another namespace", true, v1alpha1.HTTPStep{URL: url, Headers: []v1alpha1.HTTPHeader{{Name: "Authorization",
			ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: "creds", Key: "token", Namespace: "kube-system"}}}}},
			[]string{"FieldValueForbidden spec.steps[0].http.headers[0].valueFrom.secretKeyRef.namespace"}},
		{"namespaced CA in another namespace", true, v1alpha1.HTTPStep{URL: url, TLS: &v1alpha1.HTTPTLS{CA: &v1alpha1.CABundleSource{
			ConfigMapKeyRef: &v1alpha1.ConfigMapKeyRef{Name: "ca", Key: "ca.crt", Namespace: "other"}}}},
			[]string{"FieldValueForbidden spec.steps[0].http.tls.ca.configMapKeyRef.namespace"}},
		{"CA with both sources", false, v1alpha1.HTTPStep{URL: url, TLS: &v1alpha1.HTTPTLS{CA: &v1alpha1.CABundleSource{
			ConfigMapKeyRef: &v1alpha1.ConfigMapKeyRef{Name: "ca", Key: "ca.crt", Namespace: "x"},
			SecretKeyRef:    &v1alpha1.SecretKeyRef{Name: "ca", Key: "ca.crt", Namespace: "x"}}}},
			[]string{"FieldValueInvalid spec.steps[0].http.tls.ca"}},
		{"cluster client certificate without namespace", false, v1alpha1.HTTPStep{URL: url, TLS: &v1alpha1.HTTPTLS{
			ClientCertificate: &v1alpha1.ClientCertificateRef{SecretName: "cert"}}},
			[]string{"FieldValueRequired spec.steps[0].http.tls.clientCertificate.namespace"}},
		{"several", true, v1alpha1.HTTPStep{URL: "http://127.0.0.1/", Timeout: dur(time.Hour), Headers: []v1alpha1.HTTPHeader{{Name: "Connection", Value: "close"}}},
			[]string{"FieldValueInvalid spec.steps[0].http.url", "FieldValueForbidden spec.steps[0].http.headers[0].name", "FieldValueInvalid spec.steps[0].http.timeout"}},
	}
	h := newHarness(t, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := h.compileErrs("call", tt.namespaced, tt.spec)
			var got []string
			for _, e := range errs {
				got = append(got, string(e.Type)+" "+e.Field)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Compile errors\n%s\nwant\n%s\n(%v)", strings.Join(got, "\n"), strings.Join(tt.want, "\n"), errs)
			}
		})
	}
}

func TestCompileValid(t *testing.T) {
	secret := func(ns string) []v1alpha1.HTTPHeader {
		return []v1alpha1.HTTPHeader{{Name: "Authorization", ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: "creds", Key: "token", Namespace: ns}}}}
	}
	tests := []struct {
		name       string
		namespaced bool
		spec       v1alpha1.HTTPStep
	}{
		{"minimal", false, v1alpha1.HTTPStep{URL: "https://api.example/"}},
		{"templated url to loopback compiles", true, v1alpha1.HTTPStep{URL: "http://127.0.0.1:${string(object.port)}/"}},
		{"namespaced secret, default namespace", true, v1alpha1.HTTPStep{URL: "https://api.example/", Headers: secret("")}},
		{"namespaced secret, own namespace", true, v1alpha1.HTTPStep{URL: "https://api.example/", Headers: secret("ns")}},
		{"cluster secret, templated namespace", false, v1alpha1.HTTPStep{URL: "https://api.example/", Headers: secret("${object.metadata.namespace}")}},
		{"everything", false, v1alpha1.HTTPStep{
			Method: http.MethodPost, URL: "https://api.example/${object.metadata.name}",
			Headers:          []v1alpha1.HTTPHeader{{Name: "X-A", Value: "${run.name}"}},
			JSONBody:         "{'a': object.metadata.name}",
			Timeout:          dur(MaxTimeout),
			SuccessCondition: "response.status == 202 || response.body.state == 'done'",
			Outputs:          map[string]v1alpha1.Expression{"id": "response.body.id", "_x9": "steps"},
			Poll:             &v1alpha1.HTTPPoll{Interval: metav1.Duration{Duration: time.Second}},
			FollowRedirects:  true,
		}},
	}
	h := newHarness(t, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, errs := h.compileErrs("call", tt.namespaced, tt.spec)
			if len(errs) > 0 {
				t.Fatalf("Compile: %v", errs.ToAggregate())
			}
			if a == nil {
				t.Fatalf("no action")
			}
		})
	}
}
