package httpstep

import (
	"net/http"
	"strings"
	"testing"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Header names must be HTTP tokens, and the literal text of a value may not hold CR or LF (a
// line break would end the header). A sensitive value is never quoted.
func TestCompileHeaders(t *testing.T) {
	tests := []struct {
		name   string
		header v1alpha1.HTTPHeader
		want   string // "type field: part of the detail"; "" means it compiles
	}{
		{"space in name", v1alpha1.HTTPHeader{Name: "X Trace", Value: "a"}, "FieldValueInvalid spec.steps[0].http.headers[0].name: not a valid HTTP header name"},
		{"colon in name", v1alpha1.HTTPHeader{Name: "X-Trace:", Value: "a"}, "FieldValueInvalid spec.steps[0].http.headers[0].name: not a valid HTTP header name"},
		{"line break in name", v1alpha1.HTTPHeader{Name: "X-A\r\nX-Evil", Value: "a"}, "FieldValueInvalid spec.steps[0].http.headers[0].name: not a valid HTTP header name"},
		{"non-ASCII name", v1alpha1.HTTPHeader{Name: "X-Ä", Value: "a"}, "FieldValueInvalid spec.steps[0].http.headers[0].name: not a valid HTTP header name"},
		{"empty name", v1alpha1.HTTPHeader{Value: "a"}, "FieldValueRequired spec.steps[0].http.headers[0].name: "},
		{"LF in value", v1alpha1.HTTPHeader{Name: "X-A", Value: "a\nX-Evil: 1"}, "FieldValueInvalid spec.steps[0].http.headers[0].value: CR and LF are not allowed in a header value"},
		{"CR in value", v1alpha1.HTTPHeader{Name: "X-A", Value: "a\rb"}, "FieldValueInvalid spec.steps[0].http.headers[0].value: CR and LF are not allowed"},
		{"trailing newline", v1alpha1.HTTPHeader{Name: "X-A", Value: "a\n"}, "FieldValueInvalid spec.steps[0].http.headers[0].value: CR and LF are not allowed"},
		{"LF after an interpolation", v1alpha1.HTTPHeader{Name: "X-A", Value: "${run.name}\nX-Evil: 1"}, "FieldValueInvalid spec.steps[0].http.headers[0].value: CR and LF are not allowed"},
		{"line breaks inside an interpolation", v1alpha1.HTTPHeader{Name: "X-A", Value: "run ${\n  run.name\r\n} of {'a': 1}"}, ""},
		{"tab and symbols", v1alpha1.HTTPHeader{Name: "X-Odd_Name.1!#$%&'*+^`|~", Value: "a\tb"}, ""},
	}
	h := newHarness(t, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := h.compileErrs("call", false, v1alpha1.HTTPStep{URL: "https://api.example/", Headers: []v1alpha1.HTTPHeader{tt.header}})
			if tt.want == "" {
				if len(errs) != 0 {
					t.Errorf("Compile errors %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("Compile errors %v, want one: %s", errs, tt.want)
			}
			if got := string(errs[0].Type) + " " + errs[0].Field + ": " + errs[0].Detail; !strings.HasPrefix(got, tt.want) {
				t.Errorf("Compile error %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCompileHeaderLineBreakRedacted(t *testing.T) {
	h := newHarness(t, Options{})
	_, errs := h.compileErrs("call", false, v1alpha1.HTTPStep{URL: "https://api.example/", Headers: []v1alpha1.HTTPHeader{
		{Name: "Authorization", Value: "Bearer s3cr3t-token\n"}}})
	if len(errs) != 1 || errs[0].Field != "spec.steps[0].http.headers[0].value" || errs[0].BadValue != redacted {
		t.Fatalf("Compile errors %v, want one on headers[0].value with the value redacted", errs)
	}
	if msg := errs.ToAggregate().Error(); strings.Contains(msg, "s3cr3t") {
		t.Errorf("Compile error %q quotes the credential", msg)
	}
}

// A value that holds a line break once rendered, or read from a Secret, fails the attempt for
// good (the same data would fail again), naming the header and never showing the value. A
// Secret value's trailing line break is dropped, as files made into Secrets end with one.
func TestHeaderLineBreaksAtRunTime(t *testing.T) {
	srv := newServer(t, jsonHandler(http.StatusOK, "{}"))
	reader := newReader(secretObj("ns", "creds", map[string]string{
		"inner":    "Token s3cr3t-one\nX-Evil: 1",
		"cr":       "Token s3cr3t-two\rX-Evil: 1\n",
		"trailing": "Token s3cr3t-three\r\n",
	}))
	h := withReader(newHarness(t, Options{AllowedDestinations: []Destination{srv.dest(t)}}), reader)
	object := map[string]any{
		"metadata": map[string]any{"name": "db\r\nX-Evil: 1", "namespace": "ns"},
		"token":    "s3cr3t-four\nX-Evil: 1",
	}
	tests := []struct {
		name   string
		header v1alpha1.HTTPHeader
		want   string // the header named in the message; "" means the request is sent
		secret string // what the message must not show
	}{
		{"rendered", v1alpha1.HTTPHeader{Name: "X-Name", Value: "${object.metadata.name}"}, "headers[0] (X-Name)", "X-Evil"},
		{"rendered credential", v1alpha1.HTTPHeader{Name: "authorization", Value: "Bearer ${object.token}"}, "headers[0] (Authorization)", "s3cr3t-four"},
		{"Secret with an inner LF", secretHeader("Authorization", "", "creds", "inner"), "headers[0] (Authorization)", "s3cr3t-one"},
		{"Secret with an inner CR", secretHeader("X-Api-Key", "", "creds", "cr"), "headers[0] (X-Api-Key)", "s3cr3t-two"},
		{"Secret with a trailing CRLF", secretHeader("Authorization", "", "creds", "trailing"), "", "s3cr3t-three"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := srv.count()
			a := h.compile("call", true, v1alpha1.HTTPStep{URL: srv.URL, Headers: []v1alpha1.HTTPHeader{tt.header}})
			res := newStepRun(t, a, newRun("uid-1"), true, object).execNow()
			if strings.Contains(res.Message, tt.secret) {
				t.Errorf("message %q shows the value", res.Message)
			}
			if tt.want == "" {
				wantResult(t, res, steps.Succeeded, false)
				if got := srv.seen()[srv.count()-1].header.Get(tt.header.Name); got != "Token s3cr3t-three" {
					t.Errorf("%s sent as %q, want the Secret value without its trailing CRLF", tt.header.Name, got)
				}
				return
			}
			wantResult(t, res, steps.Failed, false, tt.want, "CR or LF")
			if n := srv.count(); n != before {
				t.Errorf("a request was sent")
			}
		})
	}
}
