package httpstep

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/teardown-dev/teardown-operator/steps"
)

// Keys of the step's state in the run status.
const (
	// stateRequests counts the requests whose outcome the step has used; with the run's UID and
	// the step's name it identifies the request in flight.
	stateRequests = "requests"
	// stateNextRequest is the earliest time of the next poll.
	stateNextRequest = "nextRequestAt"
)

// state is what the step keeps in its status between reconciles, so that a restart resumes it.
type state struct {
	requests int
	next     time.Time
}

func readState(m map[string]string) state {
	var s state
	s.requests, _ = strconv.Atoi(m[stateRequests])
	if t, err := time.Parse(time.RFC3339Nano, m[stateNextRequest]); err == nil {
		s.next = t
	}
	return s
}

func (s state) encode() map[string]string {
	m := map[string]string{stateRequests: strconv.Itoa(s.requests)}
	if !s.next.IsZero() {
		m[stateNextRequest] = s.next.UTC().Format(time.RFC3339Nano)
	}
	return m
}

// request is one rendered request, with the secrets to keep out of what the step writes.
type request struct {
	method   string
	u        *url.URL
	header   http.Header
	body     []byte
	redact   *redactor
	material *tlsMaterial
	sent     time.Time
}

func (r *request) String() string { return r.method + " " + r.redact.safeURL(r.u) }

// exchange is a request and what came of it.
type exchange struct {
	req      *request
	err      error
	status   int
	line     string // the status line, for example "201 Created"
	header   http.Header
	body     []byte
	tooLarge bool
	// read counts the bytes of a body that could not be read to its end.
	read int
}

// Execute implements steps.Action. It sends at most one request per call and never waits for a
// response longer than the kind's inline wait: a slower response wakes the run when it comes.
func (a *action) Execute(ctx context.Context, in *steps.Input) steps.Result {
	st := readState(in.Status.State)
	if in.Now.Before(st.next) {
		// Woken early (by a target change, say): the next poll is not due.
		return steps.Result{Outcome: steps.InProgress, CheckAfter: st.next.Sub(in.Now), Message: in.Status.Message}
	}
	key := fmt.Sprintf("%s/%s/%d", in.DeletionID(), a.step, st.requests)
	cl := a.kind.calls.get(key)
	if cl == nil {
		req, fail := a.prepare(ctx, in)
		if fail != nil {
			return *fail
		}
		client, err := a.kind.clients.get(a.namespaced, a.follow, req.material)
		if err != nil {
			return steps.Fail(false, "tls: %v", err)
		}
		run := types.NamespacedName{Namespace: in.Run.Namespace, Name: in.Run.Name}
		cl, err = a.kind.calls.start(key, req, func() *exchange { return a.do(client, req) }, func() { a.kind.wake(run) })
		if errors.Is(err, errBusy) {
			return steps.Waiting(time.Second, "%s: waiting for one of the %d requests in flight to end", req, a.kind.calls.inFlight())
		}
	}
	if !a.kind.calls.wait(cl, a.kind.inlineWait) {
		return steps.Result{Outcome: steps.InProgress, CheckAfter: a.timeout + time.Second,
			Message: fmt.Sprintf("%s: waiting for the response (sent %s)", cl.req, cl.req.sent.UTC().Format(time.RFC3339))}
	}
	a.kind.calls.take(key)
	st.requests++
	st.next = time.Time{}
	res := a.evaluate(ctx, in, cl.out, &st)
	res.State = st.encode()
	return res
}

// do sends the request and reads the response, bounded by the step's request timeout.
func (a *action) do(client *retryablehttp.Client, req *request) *exchange {
	x := &exchange{req: req}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	var body any
	if req.body != nil {
		body = req.body
	}
	r, err := retryablehttp.NewRequestWithContext(ctx, req.method, req.u.String(), body)
	if err != nil {
		x.err = err
		return x
	}
	for k, v := range req.header {
		r.Header[k] = v
	}
	if a.kind.fence != nil {
		// A replica that may have lost its lease sends nothing: the new leader sends it, with
		// the same Idempotency-Key.
		if x.err = a.kind.fence(); x.err != nil {
			return x
		}
	}
	resp, err := client.Do(r)
	if err != nil {
		x.err = err
		return x
	}
	defer func() { _ = resp.Body.Close() }()
	x.status, x.line, x.header = resp.StatusCode, resp.Status, resp.Header
	x.body, err = readBounded(resp.Body, MaxBodyBytes)
	if errors.Is(err, errTooLarge) {
		x.tooLarge, x.body = true, nil
	} else if err != nil {
		x.read, x.body = len(x.body), nil
		x.err = fmt.Errorf("reading the response body: %w", err)
	}
	return x
}

// evaluate turns an exchange into the step's result.
func (a *action) evaluate(ctx context.Context, in *steps.Input, x *exchange, st *state) steps.Result {
	r := x.req.redact
	if x.err != nil {
		return a.failedRequest(x)
	}
	// The status line is the server's text: it may echo a credential too.
	x.line = r.text(x.line)
	if x.tooLarge {
		return steps.Fail(false, "%s: %s: the response body is larger than %d bytes (1 MiB), the most a step reads", x.req, x.line, MaxBodyBytes)
	}
	vars := in.Vars.With(VarResponse, x.view())
	is2xx := x.status >= 200 && x.status < 300
	ok := is2xx
	var condErr error
	if a.success != nil {
		// A condition written for the success answer often cannot be evaluated over an error
		// answer (no such field): then the status decides, as for a false condition.
		if ok, condErr = a.success.EvalBool(ctx, vars); condErr != nil {
			ok = false
			if is2xx && a.poll == 0 {
				return steps.Fail(false, "%s: %s: successCondition: %s", x.req, x.line, r.text(condErr.Error()))
			}
		}
	}
	if ok {
		outputs, err := a.evalOutputs(ctx, vars, r)
		if err != nil {
			return steps.Fail(false, "%s: %s: %s", x.req, x.line, r.text(err.Error()))
		}
		res := steps.Done("%s: %s", x.req, x.line)
		res.Outputs = outputs
		return res
	}
	if a.poll > 0 && is2xx {
		st.next = in.Now.Add(a.poll)
		if condErr != nil {
			return steps.Waiting(a.poll, "%s: %s; successCondition cannot be evaluated yet (%s) after %d requests; asking again every %s",
				x.req, x.line, r.text(condErr.Error()), st.requests, a.poll)
		}
		return steps.Waiting(a.poll, "%s: %s; successCondition is false after %d requests; asking again every %s", x.req, x.line, st.requests, a.poll)
	}
	retry, _ := retryablehttp.ErrorPropagatedRetryPolicy(context.Background(), &http.Response{StatusCode: x.status}, nil)
	switch {
	case retry:
		res := steps.Fail(true, "%s: %s: %s", x.req, x.line, r.excerpt(x.body, excerptBytes))
		res.RetryAfter = retryAfter(x.header.Get("Retry-After"), time.Now())
		return res
	case x.status >= 300 && x.status < 400:
		return steps.Fail(false, "%s: %s: redirect to %s not followed; set followRedirects to follow redirects to the same host",
			x.req, x.line, r.text(x.header.Get("Location")))
	case x.status >= 400:
		return steps.Fail(false, "%s: %s: %s", x.req, x.line, r.excerpt(x.body, excerptBytes))
	}
	return steps.Fail(true, "%s: %s: successCondition is false: %s", x.req, x.line, a.success)
}

// failedRequest reports a request that got no response.
func (a *action) failedRequest(x *exchange) steps.Result {
	r := x.req.redact
	var refused *RefusedError
	var invalid *invalidAddrError
	var redirect *redirectError
	var ne net.Error
	switch {
	case errors.As(x.err, &refused):
		return steps.Fail(false, "%s: %v", x.req, refused)
	case errors.As(x.err, &invalid):
		return steps.Fail(false, "%s: %v", x.req, invalid)
	case errors.As(x.err, &redirect):
		return steps.Fail(false, "%s: %s", x.req, r.text(redirect.Error()))
	case (errors.Is(x.err, context.DeadlineExceeded) || errors.As(x.err, &ne) && ne.Timeout()) && x.status != 0:
		// The status and headers came, the body did not end: a server trickling it.
		return steps.Fail(true, "%s: %s: the response body did not end within the request timeout of %s (%d bytes read)",
			x.req, r.text(x.line), a.timeout, x.read)
	case errors.Is(x.err, context.DeadlineExceeded) || errors.As(x.err, &ne) && ne.Timeout():
		return steps.Fail(true, "%s: no response within the request timeout of %s", x.req, a.timeout)
	}
	err := x.err
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is in the message already
	}
	retry, _ := retryablehttp.ErrorPropagatedRetryPolicy(context.Background(), nil, x.err)
	return steps.Fail(retry, "%s: %s", x.req, r.text(err.Error()))
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date. 0 means none (use the
// step's backoff). Values are capped at a day.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		d = time.Duration(min(n, 86400)) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), 24*time.Hour)
}
