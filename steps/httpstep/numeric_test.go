package httpstep

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Hosts written as numbers, in the forms inet_aton reads (and so getaddrinfo, curl and browsers),
// are the IPv4 addresses they spell: they are checked as addresses and never sent to DNS. One that
// looks numeric but spells no address is refused, not looked up.
func TestGuardNumericHosts(t *testing.T) {
	res := &staticResolver{}
	g := newGuard(Options{AllowedDestinations: []Destination{mustDest(t, "127.0.0.1:8443")}, Resolver: res})
	tests := []struct {
		host string
		port uint16
		addr string // the address the host spells; "" when it spells none
		want string // part of the refusal; "" means admitted
	}{
		{"2130706433", 80, "127.0.0.1", "loopback address"},
		{"0x7f000001", 80, "127.0.0.1", "loopback address"},
		{"0X7F000001", 80, "127.0.0.1", "loopback address"},
		{"017700000001", 80, "127.0.0.1", "loopback address"},
		{"127.1", 80, "127.0.0.1", "loopback address"},
		{"127.0.1", 80, "127.0.0.1", "loopback address"},
		{"127.1.", 80, "127.0.0.1", "loopback address"},
		{"0177.0.0.1", 80, "127.0.0.1", "loopback address"},
		{"0x7f.1", 80, "127.0.0.1", "loopback address"},
		{"0x7f.0x0.0x0.0x1", 80, "127.0.0.1", "loopback address"},
		{"127.0x10203", 80, "127.1.2.3", "loopback address"},
		{"0251.0376.0251.0376", 80, "169.254.169.254", "link-local"},
		{"0xa9fea9fe", 80, "169.254.169.254", "link-local"},
		{"10.1", 80, "10.0.0.1", "private address"},
		{"167772161", 443, "10.0.0.1", "private address"},
		{"0", 80, "0.0.0.0", "unspecified address"},
		{"2130706433", 8443, "127.0.0.1", ""}, // allowed ip:port
		{"127.1", 8443, "127.0.0.1", ""},
		{"1572395042", 443, "93.184.216.34", ""}, // public
		{"93.0xb8.55330", 443, "93.184.216.34", ""},
		{"256.1.1.1", 80, "", "not a valid IPv4 address"},
		{"127.0.0.256", 80, "", "not a valid IPv4 address"},
		{"0x1ffffffff", 80, "", "not a valid IPv4 address"},
		{"4294967296", 80, "", "not a valid IPv4 address"},
		{"1.16777216", 80, "", "not a valid IPv4 address"},
		{"1.1.65536", 80, "", "not a valid IPv4 address"},
		{"1.2.3.4.5", 80, "", "not a valid IPv4 address"},
		{"08.0.0.1", 80, "", "not a valid IPv4 address"}, // 8 is no octal digit
		{"99999999999999999999999", 80, "", "not a valid IPv4 address"},
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
			if err == nil {
				t.Fatalf("checkName(%s, %d) admitted it, want %q", tt.host, tt.port, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.host) {
				t.Errorf("message %q, want it to name %s and say %q", err, tt.host, tt.want)
			}
			var refused *RefusedError
			switch {
			case tt.addr == "" && errors.As(err, &refused):
				t.Errorf("%s spells no address, but is refused as %q", tt.host, refused.Reason)
			case tt.addr != "" && !errors.As(err, &refused):
				t.Errorf("checkName = %v (%T), want a *RefusedError", err, err)
			case tt.addr != "":
				if refused.Host != tt.host || refused.Addr != netip.MustParseAddr(tt.addr) {
					t.Errorf("refusal of host %q address %s, want host %q address %s", refused.Host, refused.Addr, tt.host, tt.addr)
				}
				if !strings.Contains(err.Error(), tt.host+" ("+tt.addr+")") {
					t.Errorf("message %q does not name the host as written and the address", err)
				}
			}
		})
	}
	if got := res.lookups(); len(got) != 0 {
		t.Errorf("lookups %q, want none", got)
	}
}

// The dialler connects an allowed numeric host to the address it spells, and refuses a refused
// one, both without asking DNS.
func TestGuardDialNumericHost(t *testing.T) {
	srv, conns := countingServer(t)
	ap := serverAddrPort(t, srv)
	if ap.Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Skipf("the test server listens on %s, not 127.0.0.1", ap)
	}
	port := strconv.Itoa(int(ap.Port()))
	res := &staticResolver{}
	refusing := newGuard(Options{Resolver: res})
	allowing := newGuard(Options{Resolver: res, AllowedDestinations: []Destination{{Prefix: netip.PrefixFrom(ap.Addr(), 32), Port: ap.Port()}}})
	tests := []struct {
		name    string
		g       *guard
		host    string
		refused bool // a *RefusedError of 127.0.0.1; else connected
	}{
		{"decimal refused", refusing, "2130706433", true},
		{"hex refused", refusing, "0x7f000001", true},
		{"short refused", refusing, "127.1", true},
		{"octal refused", refusing, "0177.0.0.1", true},
		{"decimal allowed", allowing, "2130706433", false},
		{"hex parts allowed", allowing, "0x7f.1", false},
		{"octal allowed", allowing, "0177.0.0.1", false},
	}
	var connected int32
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := tt.g.dial(context.Background(), "tcp", net.JoinHostPort(tt.host, port))
			if !tt.refused {
				if err != nil {
					t.Fatalf("dial %s: %v, want a connection to %s", tt.host, err, ap)
				}
				connected++
				defer func() { _ = conn.Close() }()
				if got := conn.RemoteAddr().String(); got != ap.String() {
					t.Errorf("connected to %s, want %s", got, ap)
				}
				return
			}
			if err == nil {
				_ = conn.Close()
				t.Fatalf("dial %s connected, want a refusal", tt.host)
			}
			var refused *RefusedError
			if !errors.As(err, &refused) || refused.Addr != ap.Addr() || refused.Reason != "loopback address" {
				t.Errorf("dial %s = %v (%T), want a loopback refusal of %s", tt.host, err, err, ap.Addr())
			}
		})
	}
	if _, err := refusing.dial(context.Background(), "tcp", "256.1.1.1:80"); err == nil || !strings.Contains(err.Error(), "not a valid IPv4 address") {
		t.Errorf("dial 256.1.1.1 = %v, want it refused as an invalid address", err)
	}
	if got := res.lookups(); len(got) != 0 {
		t.Errorf("lookups %q, want none", got)
	}
	deadline := time.Now().Add(time.Second)
	for conns.Load() != connected && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := conns.Load(); n != connected {
		t.Errorf("server accepted %d connections, want the %d allowed", n, connected)
	}
}

// A numeric host means the same address for a ClusterTeardownPolicy (not checked, but not sent to
// DNS either), and an interpolated one that spells no address fails the step for good.
func TestNumericHostsAtRunTime(t *testing.T) {
	srv := newServer(t, jsonHandler(200, "{}"))
	if !strings.HasPrefix(srv.addr(), "127.0.0.1:") {
		t.Skipf("the test server listens on %s, not 127.0.0.1", srv.addr())
	}
	h := newHarness(t, Options{Resolver: &staticResolver{}})
	port := strconv.FormatInt(srv.port(), 10)
	tests := []struct {
		name       string
		namespaced bool
		host       string
		want       string // part of the failure; "" means it succeeds
	}{
		{"cluster, decimal", false, "2130706433", ""},
		{"cluster, short hex", false, "0x7f.1", ""},
		{"cluster, invalid", false, "256.1.1.1", "destination 256.1.1.1 refused: it is written as a number but is not a valid IPv4 address (256 is more than 255)"},
		{"namespaced, octal", true, "0177.0.0.1", "destination 0177.0.0.1 (127.0.0.1) refused for a TeardownPolicy: loopback address"},
		{"namespaced, invalid", true, "0x1ffffffff", `destination 0x1ffffffff refused: it is written as a number but is not a valid IPv4 address ("0x1ffffffff": too large)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := srv.count()
			a := h.compile("call", tt.namespaced, v1alpha1.HTTPStep{URL: "http://${object.host}:" + port + "/x"})
			res := newStepRun(t, a, newRun("uid-1"), tt.namespaced, map[string]any{"host": tt.host}).execNow()
			if tt.want == "" {
				wantResult(t, res, steps.Succeeded, false, "GET http://"+tt.host+":"+port+"/x: 200 OK")
				if srv.count() != before+1 {
					t.Errorf("the server saw no request")
				}
				return
			}
			wantResult(t, res, steps.Failed, false, tt.want)
			if srv.count() != before {
				t.Errorf("a request was sent")
			}
		})
	}
}
