package httpstep

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/teardown-dev/teardown-operator/steps"
)

// RenderedRequest is a request as a plan shows it: secret values redacted.
type RenderedRequest struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
}

// Plan implements steps.Planner: the request the step would send now, rendered with the Secrets
// it names read, and nothing sent.
func (a *action) Plan(ctx context.Context, in *steps.Input) steps.Plan {
	req, fail := a.prepare(ctx, in)
	if fail != nil {
		return steps.Plan{Summary: a.method + " (not rendered)", Err: fail.Message}
	}
	out := RenderedRequest{Method: req.method, URL: req.redact.safeURL(req.u), Headers: map[string]string{}}
	for _, name := range slices.Sorted(maps.Keys(req.header)) {
		out.Headers[name] = req.redact.text(strings.Join(req.header.Values(name), ", "))
	}
	out.Body = req.redact.text(string(req.body))
	summary := out.Method + " " + out.URL
	if a.poll > 0 {
		summary += ", then every " + a.poll.String() + " until successCondition holds"
	}
	return steps.Plan{Summary: summary, Rendered: out}
}
