package httpstep

import (
	"encoding/json"
	"net/url"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// redacted replaces secret values in anything the step writes.
const redacted = "[redacted]"

// minRedactLen is the shortest value redacted inside other text: replacing a one- or
// two-character value everywhere would garble messages without hiding anything.
const minRedactLen = 4

// redactor removes known secret values from text.
type redactor struct {
	secrets []string
}

// add records a secret value; for a credential with a scheme ("Bearer abc"), the credential
// alone is recorded too, since servers echo it without the scheme.
func (r *redactor) add(v string) {
	v = strings.TrimSpace(v)
	if len(v) < minRedactLen {
		return
	}
	r.secrets = append(r.secrets, v)
	if scheme, cred, ok := strings.Cut(v, " "); ok && !strings.ContainsAny(scheme, " \t") {
		if cred = strings.TrimSpace(cred); len(cred) >= minRedactLen {
			r.secrets = append(r.secrets, cred)
		}
	}
	// Longer values first, so that a value containing another is replaced whole.
	sort.SliceStable(r.secrets, func(i, j int) bool { return len(r.secrets[i]) > len(r.secrets[j]) })
}

// text returns s without any secret value.
func (r *redactor) text(s string) string {
	for _, v := range r.secrets {
		s = strings.ReplaceAll(s, v, redacted)
	}
	return s
}

// value returns a copy of a JSON-like value with secret values removed from every string.
func (r *redactor) value(v any) any {
	switch x := v.(type) {
	case string:
		return r.text(x)
	case json.Number:
		// A number that is a secret (a numeric PIN or account key) becomes the redaction string.
		if s := string(x); r.text(s) != s {
			return redacted
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[r.text(k)] = r.value(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.value(e)
		}
		return out
	}
	return v
}

// safeURL is u for messages: without a password or secret values.
func (r *redactor) safeURL(u *url.URL) string {
	return r.text(u.Redacted())
}

// excerpt is the start of a response body for a message: at most n bytes of valid UTF-8 on one
// line, secret values removed.
func (r *redactor) excerpt(body []byte, n int) string {
	// Redact before cutting, so that no prefix of a secret survives at the cut.
	s := r.text(string(body))
	cut := len(s) > n
	if cut {
		// Cut at the start of the rune the limit falls in, not inside it.
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return ' '
		}
		return c
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if cut {
		s += "…"
	}
	return s
}
