package httpstep

import (
	"strings"
	"testing"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// A URL whose scheme, host and port are written out (whatever follows them is interpolated) has a
// destination known at compile time: it is checked then, as a literal URL is.
func TestCompileURLDestination(t *testing.T) {
	tests := []struct {
		name       string
		namespaced bool
		url        string
		want       string // part of the error on spec.steps[0].http.url; "" means it compiles
	}{
		{"literal numeric", true, "http://2130706433/", "destination 2130706433 (127.0.0.1) refused for a TeardownPolicy: loopback address"},
		{"literal short form", true, "http://0x7f.1:8080/x", "destination 0x7f.1 (127.0.0.1) refused for a TeardownPolicy: loopback address"},
		{"literal octal", true, "http://0251.0376.0251.0376/latest/", "(169.254.169.254) refused for a TeardownPolicy: link-local"},
		{"literal invalid number", true, "http://256.1.1.1/", "not a valid IPv4 address"},
		{"literal invalid number, cluster", false, "http://0x1ffffffff/", "not a valid IPv4 address"},
		{"literal numeric, cluster", false, "http://2130706433/", ""},
		{"interpolated path", true, "http://127.0.0.2:8080/x/${object.metadata.name}", "destination 127.0.0.2 refused for a TeardownPolicy: loopback address"},
		{"interpolated query", true, "http://127.0.0.2:8080?name=${object.metadata.name}", "loopback address"},
		{"interpolated fragment", true, "http://127.0.0.2#${object.metadata.name}", "loopback address"},
		{"interpolated path, numeric host", true, "https://0xa9fea9fe/${object.metadata.name}", "link-local"},
		{"interpolated path, metadata name", true, "http://metadata.google.internal/computeMetadata/${object.metadata.name}", "cloud metadata host name"},
		{"interpolated path, invalid number", true, "http://1.2.3.4.5/${object.metadata.name}", "not a valid IPv4 address"},
		{"interpolated path, bad scheme", false, "ftp://files.example/${object.metadata.name}", "scheme must be http or https"},
		{"interpolated path, allowed", true, "http://127.0.0.1:8443/x/${object.metadata.name}", ""},
		{"interpolated path, public", true, "https://api.example/v1/${object.metadata.name}?x=${run.name}", ""},
		{"interpolated path, cluster", false, "http://127.0.0.2:8080/x/${object.metadata.name}", ""},
		{"interpolated port", true, "http://127.0.0.2:${string(object.port)}/", ""},  // checked at run time
		{"interpolated host part", true, "http://127.0.0.${string(object.n)}/x", ""}, // ditto
		{"interpolated host", true, "http://${object.host}/x", ""},                   // ditto
		{"interpolated userinfo", true, "http://user:${object.pw}@127.0.0.2/x", ""},  // the host follows: ditto
		{"interpolated scheme", true, "${object.scheme}://127.0.0.2/x", ""},          // ditto
		{"escaped interpolation in path", true, "http://127.0.0.2/$${x}/${object.metadata.name}", "loopback address"},
		{"no scheme before an interpolated path", false, "db-api.example.com/v1/${object.metadata.name}", "no scheme"},
		{"bad scheme before an interpolated host", false, "ftp://${object.host}/x", "scheme must be http or https"},
		{"port out of range", false, "https://registry.example.com:84430/v2/${object.metadata.name}", "port 84430 is out of range"},
		{"port out of range, literal", true, "https://registry.example.com:0/v2/", "port 0 is out of range"},
	}
	h := newHarness(t, Options{AllowedDestinations: []Destination{mustDest(t, "127.0.0.1:8443")}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := h.compileErrs("call", tt.namespaced, v1alpha1.HTTPStep{URL: tt.url})
			if tt.want == "" {
				if len(errs) != 0 {
					t.Errorf("Compile errors %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != "spec.steps[0].http.url" || errs[0].BadValue != tt.url || !strings.Contains(errs[0].Detail, tt.want) {
				t.Errorf("Compile errors %v, want one on spec.steps[0].http.url saying %q", errs, tt.want)
			}
		})
	}
}
