package httpstep

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

func (a *action) compileHeaders(cc steps.CompileContext, hs []v1alpha1.HTTPHeader, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, h := range hs {
		hp := path.Index(i)
		name := http.CanonicalHeaderKey(h.Name)
		switch {
		case h.Name == "":
			errs = append(errs, field.Required(hp.Child("name"), "name the header"))
			continue
		case !httpguts.ValidHeaderFieldName(h.Name):
			errs = append(errs, field.Invalid(hp.Child("name"), h.Name,
				"not a valid HTTP header name: letters, digits and !#$%&'*+-.^_|~ only, without spaces, colons or other separators"))
			continue
		case forbiddenHeaders[name]:
			errs = append(errs, field.Forbidden(hp.Child("name"), fmt.Sprintf("%s is set by the HTTP client", name)))
			continue
		case seen[name]:
			errs = append(errs, field.Duplicate(hp.Child("name"), h.Name))
			continue
		}
		seen[name] = true
		out, err := compileHeaderValue(cc, h, hp, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		a.headers = append(a.headers, out)
	}
	return errs
}

// compileHeaderValue compiles the value of header h, named name once canonical.
func compileHeaderValue(cc steps.CompileContext, h v1alpha1.HTTPHeader, hp *field.Path, name string) (header, *field.Error) {
	out := header{name: name, sensitive: sensitiveHeaders[name]}
	switch {
	case h.ValueFrom != nil && h.Value != "":
		return out, field.Invalid(hp, h.Name, "set exactly one of value or valueFrom")
	case h.ValueFrom != nil:
		ref := h.ValueFrom.SecretKeyRef
		if ref == nil {
			return out, field.Required(hp.Child("valueFrom", "secretKeyRef"), "name the Secret key")
		}
		var err *field.Error
		out.secret, err = compileRef(cc, hp.Child("valueFrom", "secretKeyRef"), ref.Namespace, ref.Name, ref.Key)
		return out, err
	}
	t, err := cc.Env.CompileTemplate(h.Value)
	if err != nil {
		detail := err.Error()
		if out.sensitive {
			// The template error quotes the value: say less rather than show a credential.
			detail = "invalid ${...} interpolation (details not shown: the value is a credential)"
		}
		return out, field.Invalid(hp.Child("value"), redactedIf(out.sensitive, h.Value), detail)
	}
	if literalLineBreak(cc.Env, h.Value) {
		return out, field.Invalid(hp.Child("value"), redactedIf(out.sensitive, h.Value),
			"CR and LF are not allowed in a header value: a line break would end the header")
	}
	out.value = t
	return out, nil
}

// literalLineBreak reports whether the literal text of the valid template src holds CR or LF.
// One inside a ${...} is CEL whitespace, not part of the value. A prefix of a valid template
// compiles exactly when it does not end inside an interpolation, which tells where each line
// break falls without a second template parser.
func literalLineBreak(env *expr.Env, src string) bool {
	for i := 0; i < len(src); i++ {
		if src[i] != '\r' && src[i] != '\n' {
			continue
		}
		if _, err := env.CompileTemplate(src[:i]); err == nil {
			return true
		}
	}
	return false
}

func redactedIf(sensitive bool, v string) string {
	if sensitive {
		return redacted
	}
	return v
}

// headerValue renders header i's value or reads it from its Secret, recording a value to
// redact. A value holding CR or LF fails the attempt for good (the same data fails again), with
// the value not shown: it may be a credential, and net/http would refuse it anyway, as a
// connection error that looks transient.
func (a *action) headerValue(ctx context.Context, in *steps.Input, i int, h header, r *redactor) (string, *steps.Result) {
	var v string
	why := "the rendered value contains CR or LF"
	if h.secret != nil {
		data, fail := a.readKey(ctx, in, h.secret, true)
		if fail != nil {
			return "", fail
		}
		// Files made into Secrets often end in a newline: it is not part of the value.
		v = strings.TrimRight(string(data), "\r\n")
		r.add(v)
		why = fmt.Sprintf("the value of Secret %s key %q contains CR or LF before its end (only a trailing line break is dropped)", h.secret.name, h.secret.key)
	} else {
		var err error
		if v, err = h.value.Render(ctx, in.Vars); err != nil {
			return "", failed(false, "headers[%d] (%s): %v", i, h.name, err)
		}
		if h.sensitive {
			r.add(v)
		}
	}
	if strings.ContainsAny(v, "\r\n") {
		return "", failed(false, "headers[%d] (%s): %s, which a header value may not hold; the value is not shown", i, h.name, why)
	}
	return v, nil
}
