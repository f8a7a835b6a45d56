package httpstep

import (
	"encoding/json"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func newRedactor(secrets ...string) *redactor {
	r := &redactor{}
	for _, s := range secrets {
		r.add(s)
	}
	return r
}

func TestRedactorAdd(t *testing.T) {
	tests := []struct {
		name string
		add  []string
		want []string
	}{
		{"plain", []string{"s3cr3t"}, []string{"s3cr3t"}},
		{"trimmed", []string{"  s3cr3t\n"}, []string{"s3cr3t"}},
		{"bearer token and credential alone", []string{"Bearer s3cr3t-token"}, []string{"Bearer s3cr3t-token", "s3cr3t-token"}},
		{"basic credential", []string{"Basic dXNlcjpwYXNz"}, []string{"Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"}},
		{"short credential not alone", []string{"Bearer abc"}, []string{"Bearer abc"}},
		{"too short", []string{"abc", "", "  ab  "}, nil},
		{"four characters", []string{"abcd"}, []string{"abcd"}},
		{"longest first", []string{"abcd", "abcdefgh", "abcdef"}, []string{"abcdefgh", "abcdef", "abcd"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRedactor(tt.add...)
			if !reflect.DeepEqual(r.secrets, tt.want) {
				t.Errorf("secrets %q, want %q", r.secrets, tt.want)
			}
		})
	}
}

func TestRedactorText(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{"none", nil, "Bearer s3cr3t-token", "Bearer s3cr3t-token"},
		{"whole value", []string{"Bearer s3cr3t-token"}, `got "Bearer s3cr3t-token"`, `got "[redacted]"`},
		{"credential alone", []string{"Bearer s3cr3t-token"}, `{"token":"s3cr3t-token"}`, `{"token":"[redacted]"}`},
		{"every occurrence", []string{"s3cr3t"}, "s3cr3t and s3cr3t", "[redacted] and [redacted]"},
		{"short value kept", []string{"abc"}, "abc abcd", "abc abcd"},
		{"containing value whole", []string{"abcd", "abcdefgh"}, "xabcdefghx abcd", "x[redacted]x [redacted]"},
		{"several", []string{"first-secret", "second-secret"}, "first-secret/second-secret", "[redacted]/[redacted]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := newRedactor(tt.secrets...).text(tt.in); got != tt.want {
				t.Errorf("text(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestRedactorValue(t *testing.T) {
	r := newRedactor("Bearer s3cr3t-token")
	in := map[string]any{
		"token": "s3cr3t-token",
		"nested": map[string]any{
			"list":          []any{"x", "prefix s3cr3t-token suffix", int64(3), true, nil, map[string]any{"deep": "Bearer s3cr3t-token"}},
			"s3cr3t-token":  "key is secret",
			"number":        json.Number("12"),
			"float":         1.5,
			"public string": "hello",
		},
	}
	want := map[string]any{
		"token": "[redacted]",
		"nested": map[string]any{
			"list":          []any{"x", "prefix [redacted] suffix", int64(3), true, nil, map[string]any{"deep": "[redacted]"}},
			"[redacted]":    "key is secret",
			"number":        json.Number("12"),
			"float":         1.5,
			"public string": "hello",
		},
	}
	got := r.value(in)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("value:\n%#v\nwant\n%#v", got, want)
	}
	// The input is left as it was.
	if in["token"] != "s3cr3t-token" {
		t.Errorf("value changed its input")
	}
}

// A secret made of digits, echoed by a server as a JSON number, must not reach outputs either:
// evalOutputs decodes with UseNumber, so numbers reach value as json.Number.
func TestRedactorValueNumericSecret(t *testing.T) {
	r := newRedactor("98765432")
	got, err := json.Marshal(r.value(map[string]any{"key": json.Number("98765432")}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got), "98765432") {
		t.Errorf("BUG: numeric secret kept in %s: redactor.value redacts only strings, not json.Number", got)
	}
}

func TestRedactorSafeURL(t *testing.T) {
	u, err := url.Parse("https://user:pa55word@api.example/v1/tok3n-value?x=1")
	if err != nil {
		t.Fatal(err)
	}
	got := newRedactor("tok3n-value").safeURL(u)
	if want := "https://user:xxxxx@api.example/v1/[redacted]?x=1"; got != want {
		t.Errorf("safeURL = %q, want %q", got, want)
	}
}

func TestRedactorExcerpt(t *testing.T) {
	secret := "s3cr3t-token-value"
	long := strings.Repeat("a", 300)
	tests := []struct {
		name    string
		secrets []string
		body    string
		n       int
		want    string
	}{
		{"short", nil, "not found", 256, "not found"},
		{"empty", nil, "", 256, ""},
		{"cut", nil, long, 256, strings.Repeat("a", 256) + "…"},
		{"exactly n", nil, long[:256], 256, long[:256]},
		{"control characters", nil, "line one\r\nline\ttwo\x00\x1b[31mred\x7f", 256, "line one line two [31mred"},
		{"spaces collapsed", nil, "  a   b  \n\n c ", 256, "a b c"},
		{"secret", []string{"Bearer " + secret}, `{"error":"bad token ` + secret + `"}`, 256, `{"error":"bad token [redacted]"}`},
		{"utf-8 boundary", nil, strings.Repeat("a", 255) + "é" + "bbb", 256, strings.Repeat("a", 255) + "…"},
		{"utf-8 boundary 3 bytes", nil, strings.Repeat("a", 254) + "€" + "bbb", 256, strings.Repeat("a", 254) + "…"},
		{"invalid utf-8 replaced", nil, "bad \xff byte", 256, "bad ? byte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newRedactor(tt.secrets...).excerpt([]byte(tt.body), tt.n)
			if got != tt.want {
				t.Errorf("excerpt = %q, want %q", got, tt.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("excerpt %q is not valid UTF-8", got)
			}
		})
	}
}

// A secret that straddles the cut must not be partly quoted: it is redacted before the cut.
func TestRedactorExcerptSecretAtCut(t *testing.T) {
	secret := "s3cr3t-token-value"
	r := newRedactor(secret)
	for start := 240; start <= 256; start++ {
		body := strings.Repeat("x", start) + secret + strings.Repeat("y", 50)
		got := r.excerpt([]byte(body), 256)
		for i := minRedactLen; i <= len(secret); i++ {
			if strings.Contains(got, secret[:i]) {
				t.Fatalf("secret at %d: excerpt %q quotes %q", start, got, secret[:i])
			}
		}
		if !strings.HasSuffix(got, "…") {
			t.Errorf("secret at %d: excerpt %q is not marked as cut", start, got)
		}
	}
}

// A body with an invalid byte before the cut (say, Latin-1 text) must still be quoted: only a
// rune split by the cut is dropped.
func TestRedactorExcerptInvalidUTF8BeforeCut(t *testing.T) {
	body := "Fehler: ung\xfcltige Anfrage " + strings.Repeat("a", 300) // ISO-8859-1 ü
	got := newRedactor().excerpt([]byte(body), 256)
	if want := "Fehler: ung?ltige Anfrage aaaa"; !strings.HasPrefix(got, want) {
		t.Errorf("BUG: excerpt = %q, want it to start with %q: the loop that backs off to a UTF-8 boundary "+
			"trims the whole string when an invalid byte comes before the cut", got, want)
	}
}
