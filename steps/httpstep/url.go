package httpstep

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// compileURL compiles the url and, when its destination is known at compile time, checks it
// then, so that a refused one makes the policy not Ready instead of failing each teardown.
func (a *action) compileURL(cc steps.CompileContext, src string, path *field.Path) field.ErrorList {
	t, err := cc.Env.CompileTemplate(src)
	if err != nil {
		return field.ErrorList{field.Invalid(path, src, err.Error())}
	}
	a.url = t
	switch scheme, ok := fixedScheme(t.LiteralPrefix()); {
	case ok && scheme == "":
		return field.ErrorList{field.Invalid(path, src, "no scheme: start the URL with https:// or http:// (the text before ${ leaves no place for one)")}
	case ok && scheme != "http" && scheme != "https":
		return field.ErrorList{field.Invalid(path, src, fmt.Sprintf("scheme must be http or https, not %q", scheme))}
	}
	if fixed, ok := fixedDestination(t); ok {
		if _, err := a.kind.checkURL(fixed, cc.Namespaced); err != nil {
			return field.ErrorList{field.Invalid(path, src, err.Error())}
		}
	}
	return nil
}

// fixedScheme returns the scheme every rendering of a URL starting with prefix has, when the
// prefix fixes it: "" when the prefix ends the scheme part (a "/", "?" or "#" before any "://"),
// so that no rendering can have one.
func fixedScheme(prefix string) (string, bool) {
	if scheme, _, ok := strings.Cut(prefix, "://"); ok {
		return strings.ToLower(scheme), true
	}
	if strings.ContainsAny(prefix, "/?#") {
		return "", true
	}
	return "", false
}

// fixedDestination returns the part of every rendering of t that fixes its scheme, host and
// port: all of a literal URL, or the literal text before the first ${ up to the end of the
// authority, when that text holds scheme:// and the authority's end ("/", "?" or "#").
// url.Parse ends the authority at the first of those, so no rendered text after it can change
// the destination.
func fixedDestination(t *expr.Template) (string, bool) {
	prefix := t.LiteralPrefix()
	if t.Literal() {
		return prefix, true
	}
	scheme, rest, ok := strings.Cut(prefix, "://")
	if !ok {
		return "", false
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		return "", false
	}
	return scheme + "://" + rest[:end], true
}

// checkURL parses a rendered URL and refuses a host written as a number that is no address (see
// hostAddr). For a TeardownPolicy it also refuses a destination known bad without a lookup (the
// dialer checks the resolved addresses).
func (k *Kind) checkURL(raw string, namespaced bool) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme must be http or https, not %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("no host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("port %s is out of range (1 to 65535)", p)
		}
	}
	if namespaced {
		if err := k.guard.checkName(u.Hostname(), portOf(u)); err != nil {
			return nil, err
		}
	} else if _, _, err := hostAddr(u.Hostname()); err != nil {
		return nil, err
	}
	return u, nil
}

func portOf(u *url.URL) uint16 {
	if p := u.Port(); p != "" {
		var n uint16
		_, _ = fmt.Sscan(p, &n)
		return n
	}
	if strings.EqualFold(u.Scheme, "https") {
		return 443
	}
	return 80
}

// CheckURL reports whether the kind would refuse a rendered URL before sending it: what kubectl
// teardown plan asks of a kind configured as the operator is.
func (k *Kind) CheckURL(raw string, namespaced bool) error {
	_, err := k.checkURL(raw, namespaced)
	return err
}
