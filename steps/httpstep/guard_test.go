package httpstep

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// The API server is its address and port: another port of the same address is judged like any
// other address. Options.APIServerHosts entries come as main.go and the integration suite pass
// them: a URL, host:port, or a bare host (port 443).
func TestGuardAPIServerPort(t *testing.T) {
	res := &staticResolver{addrs: map[string][]netip.Addr{"api.internal.example": {netip.MustParseAddr("203.0.113.10")}}}
	g := newGuard(Options{
		APIServerHosts: []string{
			"https://127.0.0.1:6443", // rest.Config.Host, as the integration suite passes it
			"127.0.0.2:7443",         // url.Parse(cfg.Host).Host, as main.go passes it
			"10.96.0.1",              // KUBERNETES_SERVICE_HOST: no port
			"http://10.0.0.9",        // a URL without port: its scheme's
			"[fd00::7]:6443",
			"fd00::8",
			"https://api.internal.example",
			"198.51.100.7:notaport", // a port that cannot be read: every port
		},
		AllowedDestinations: []Destination{mustDest(t, "127.0.0.2:7443")},
		Resolver:            res,
	})
	const api = "the cluster's API server"
	tests := []struct {
		host string
		port uint16
		want string // part of the refusal; "" means admitted
	}{
		{"127.0.0.1", 6443, api},
		{"127.0.0.1", 8080, "loopback address"}, // a test server beside the API server
		{"127.0.0.1", 443, "loopback address"},
		{"::ffff:127.0.0.1", 6443, api},
		{"0x7f000001", 6443, api},
		{"127.0.0.2", 7443, ""}, // allow-listing wins
		{"127.0.0.2", 7444, "loopback address"},
		{"10.96.0.1", 443, api},
		{"10.96.0.1", 80, "private address"},
		{"10.0.0.9", 80, api},
		{"10.0.0.9", 443, "private address"},
		{"fd00::7", 6443, api},
		{"fd00::7", 443, "private address"},
		{"fd00::8", 443, api},
		{"fd00::8", 8443, "private address"},
		{"203.0.113.10", 443, api}, // the API server name's address, at the name's port
		{"203.0.113.10", 6443, ""},
		{"api.internal.example", 8080, api}, // the name itself: any port
		{"198.51.100.7", 1234, api},
		{"198.51.100.8", 1234, ""},
	}
	for _, tt := range tests {
		t.Run(tt.host+":"+strconv.Itoa(int(tt.port)), func(t *testing.T) {
			err := g.checkName(tt.host, tt.port)
			if tt.want == "" {
				if err != nil {
					t.Errorf("checkName(%s, %d) = %v, want admitted", tt.host, tt.port, err)
				}
				return
			}
			var refused *RefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("checkName(%s, %d) = %v, want a *RefusedError", tt.host, tt.port, err)
			}
			if refused.Reason != tt.want {
				t.Errorf("reason %q, want %q", refused.Reason, tt.want)
			}
		})
	}
}

// A refused name cannot be allowed (the flag takes addresses only), so its message says so; a
// refused address names the entry that would allow it.
func TestRefusedErrorAdvice(t *testing.T) {
	res := &staticResolver{addrs: map[string][]netip.Addr{"evil.example": {netip.MustParseAddr("127.0.0.1")}}}
	g := newGuard(Options{APIServerHosts: []string{"api.cluster.example:6443"}, Resolver: res})
	const nameAdvice = "host names cannot be allowed, so this one is always refused; the step may call an address a cluster admin allows with --http-allowed-destinations instead"
	tests := []struct {
		host string
		port uint16
		want string // the whole message
	}{
		{"metadata.google.internal", 80, "destination metadata.google.internal refused for a TeardownPolicy: cloud metadata host name; " + nameAdvice},
		{"kubernetes.default", 443, "destination kubernetes.default refused for a TeardownPolicy: the cluster's API server; " + nameAdvice},
		{"api.cluster.example", 6443, "destination api.cluster.example refused for a TeardownPolicy: the cluster's API server; " + nameAdvice},
		{"10.0.0.12", 443, "destination 10.0.0.12 refused for a TeardownPolicy: private address; " +
			"a cluster admin may allow the address by adding 10.0.0.12:443 to the operator flag --http-allowed-destinations"},
		{"fd00::1", 8443, "destination fd00::1 refused for a TeardownPolicy: private address; " +
			"a cluster admin may allow the address by adding [fd00::1]:8443 to the operator flag --http-allowed-destinations"},
		{"2130706433", 80, "destination 2130706433 (127.0.0.1) refused for a TeardownPolicy: loopback address; " +
			"a cluster admin may allow the address by adding 127.0.0.1:80 to the operator flag --http-allowed-destinations"},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			err := g.checkName(tt.host, tt.port)
			if !errors.As(err, new(*RefusedError)) {
				t.Fatalf("checkName(%s, %d) = %v, want a *RefusedError", tt.host, tt.port, err)
			}
			if err.Error() != tt.want {
				t.Errorf("message\n%s\nwant\n%s", err, tt.want)
			}
		})
	}
	// A name refused by the address it resolves to: the address is what can be allowed.
	err := g.checkAddr("evil.example", netip.MustParseAddr("127.0.0.1"), 8080)
	if want := "destination evil.example (127.0.0.1) refused for a TeardownPolicy: loopback address; " +
		"a cluster admin may allow the address by adding 127.0.0.1:8080 to the operator flag --http-allowed-destinations"; err == nil || err.Error() != want {
		t.Errorf("message\n%v\nwant\n%s", err, want)
	}
	// Built by hand, without a port: the address alone.
	if got := (&RefusedError{Host: "10.1.2.3", Addr: netip.MustParseAddr("10.1.2.3"), Reason: "private address"}).Error(); !strings.HasSuffix(got, "by adding 10.1.2.3 to the operator flag --http-allowed-destinations") {
		t.Errorf("message %q, want the address alone as the entry", got)
	}
}
