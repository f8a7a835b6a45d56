package httpstep

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseDestination(t *testing.T) {
	tests := []struct {
		in     string
		prefix string
		port   uint16
		str    string // String(); "" means in
	}{
		{"127.0.0.1", "127.0.0.1/32", 0, ""},
		{" 127.0.0.1 ", "127.0.0.1/32", 0, "127.0.0.1"},
		{"127.0.0.1:8443", "127.0.0.1/32", 8443, ""},
		{"10.0.0.0/8", "10.0.0.0/8", 0, ""},
		{"10.1.2.3/8", "10.0.0.0/8", 0, "10.0.0.0/8"}, // masked
		{"10.20.0.0/16:443", "10.20.0.0/16", 443, ""},
		{"::1", "::1/128", 0, ""},
		{"[::1]", "::1/128", 0, "::1"},
		{"[::1]:443", "::1/128", 443, ""},
		{"[fd00::1]:65535", "fd00::1/128", 65535, ""},
		{"fd00::/8", "fd00::/8", 0, ""},
		{"[fd00::/8]:443", "fd00::/8", 443, ""},
		{"[FD00::1]:1", "fd00::1/128", 1, "[fd00::1]:1"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8", 0, "10.0.0.0/8"}, // kept unmapped, as checkAddr compares
		{"[::ffff:127.0.0.1]:8443", "127.0.0.1/32", 8443, "127.0.0.1:8443"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d, err := ParseDestination(tt.in)
			if err != nil {
				t.Fatalf("ParseDestination(%q): %v", tt.in, err)
			}
			if got := d.Prefix.String(); got != tt.prefix {
				t.Errorf("Prefix = %s, want %s", got, tt.prefix)
			}
			if d.Port != tt.port {
				t.Errorf("Port = %d, want %d", d.Port, tt.port)
			}
			want := tt.str
			if want == "" {
				want = tt.in
			}
			if got := d.String(); got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
			back, err := ParseDestination(d.String())
			if err != nil {
				t.Fatalf("ParseDestination(String()) = %v", err)
			}
			if back != d {
				t.Errorf("round trip: %+v, want %+v", back, d)
			}
		})
	}
}

func TestParseDestinationErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string // part of the error
	}{
		{"", "is not an IP address or CIDR range"},
		{"example.com", "host names cannot be allowed"},
		{"example.com:443", "host names cannot be allowed"},
		{"localhost", "host names cannot be allowed"},
		{"127.0.0.1:0", `port "0" is not a number from 1 to 65535`},
		{"127.0.0.1:70000", `port "70000" is not a number from 1 to 65535`},
		{"127.0.0.1:-1", `port "-1"`},
		{"127.0.0.1:http", `port "http"`},
		{"[::1]:0", `port "0"`},
		{"[::1]:70000", `port "70000"`},
		{"[::1", "missing ]"},
		{"[::1]443", "expected :port after ]"},
		{"10.0.0.0/33", "is not an IP address or CIDR range"},
		{"10.0.0.0/8/8", "is not an IP address or CIDR range"},
		{"256.0.0.1", "is not an IP address or CIDR range"},
		{"127.1", "is not an IP address or CIDR range"},
		{"[example.com]:80", "is not an IP address or CIDR range"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d, err := ParseDestination(tt.in)
			if err == nil {
				t.Fatalf("ParseDestination(%q) = %v, want an error", tt.in, d)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// An allow-list entry must mean what it says: a colon with no port is a typo, not "any port", and
// an IPv4-mapped address must admit what checkAddr compares (the unmapped IPv4 address).
func TestParseDestinationLoose(t *testing.T) {
	for _, in := range []string{"127.0.0.1:", "[::1]:", "10.0.0.0/8:"} {
		if d, err := ParseDestination(in); err == nil {
			t.Errorf("BUG: ParseDestination(%q) = %v (port %d: every port), want an error for the empty port", in, d, d.Port)
		}
	}
	d, err := ParseDestination("[::ffff:127.0.0.1]:8443")
	if err != nil {
		t.Fatalf("ParseDestination: %v", err)
	}
	g := newGuard(Options{AllowedDestinations: []Destination{d}, Resolver: &staticResolver{}})
	if err := g.checkName("::ffff:127.0.0.1", 8443); err != nil {
		t.Errorf("BUG: the allowed %s is refused (%v): ParseDestination keeps the IPv4-mapped form, checkAddr unmaps the address", d, err)
	}
}

func mustDest(t *testing.T, s string) Destination {
	t.Helper()
	d, err := ParseDestination(s)
	if err != nil {
		t.Fatalf("ParseDestination(%q): %v", s, err)
	}
	return d
}

func TestRefusedReason(t *testing.T) {
	tests := []struct {
		addr string
		want string // part of the reason; "" means admitted
	}{
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"10.0.0.1", "private"},
		{"10.255.255.255", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"172.15.255.255", ""},
		{"172.32.0.1", ""},
		{"192.168.1.1", "private"},
		{"fc00::1", "private"},
		{"fd12:3456::1", "private"},
		{"100.64.0.1", "shared address space"},
		{"100.127.255.255", "shared address space"},
		{"100.128.0.1", ""},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"255.255.255.255", "reserved"},
		{"64:ff9b::7f00:1", "loopback address embedded in an IPv6 address"},
		{"64:ff9b::a9fe:a9fe", "link-local address (cloud metadata services answer there) embedded"},
		{"64:ff9b::5db8:d822", ""}, // NAT64 of 93.184.216.34
		{"2002:7f00:1::", "loopback address embedded"},
		{"2002:5db8:d822::1", ""},
		{"93.184.216.34", ""},
		{"8.8.8.8", ""},
		{"2606:2800:220:1::1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			got := refusedReason(netip.MustParseAddr(tt.addr))
			switch {
			case tt.want == "" && got != "":
				t.Errorf("refusedReason(%s) = %q, want admitted", tt.addr, got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Errorf("refusedReason(%s) = %q, want it to contain %q", tt.addr, got, tt.want)
			}
		})
	}
}

// staticResolver answers every lookup with the same addresses and counts the lookups.
type staticResolver struct {
	mu    sync.Mutex
	addrs map[string][]netip.Addr
	calls []string
}

func (r *staticResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, network+" "+host)
	a, ok := r.addrs[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return a, nil
}

func (r *staticResolver) lookups() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func TestGuardChecks(t *testing.T) {
	res := &staticResolver{addrs: map[string][]netip.Addr{
		"api.cluster.example": {netip.MustParseAddr("203.0.113.10")},
	}}
	g := newGuard(Options{
		AllowedDestinations: []Destination{mustDest(t, "127.0.0.1:8443"), mustDest(t, "[fd00::1]:443"), mustDest(t, "10.20.0.0/16")},
		APIServerHosts:      []string{"198.51.100.7:6443", "API.Cluster.Example.", "[2001:db8::7]:443", ""},
		Resolver:            res,
	})
	if got := res.lookups(); len(got) != 1 || got[0] != "ip api.cluster.example" {
		t.Errorf("newGuard looked up %q, want the API server's name once", got)
	}
	tests := []struct {
		host string
		port uint16
		want string // part of the refusal; "" means admitted
	}{
		{"127.0.0.1", 80, "loopback address"},
		{"127.0.0.1", 8443, ""}, // allowed ip:port
		{"127.0.0.1", 8444, "loopback address"},
		{"127.0.0.2", 8443, "loopback address"},
		{"::1", 443, "loopback address"},
		{"[::1]", 443, "loopback address"},
		{"::ffff:127.0.0.1", 8080, "loopback address"},
		{"::ffff:127.0.0.1", 8443, ""}, // mapped, allowed as its IPv4 form
		{"64:ff9b::7f00:1", 80, "loopback address embedded in an IPv6 address"},
		{"169.254.169.254", 80, "link-local"},
		{"fe80::1", 80, "link-local"},
		{"fe80::1%eth0", 80, "link-local"},
		{"10.0.0.1", 80, "private address"},
		{"10.20.3.4", 80, ""}, // allowed range, any port
		{"172.16.0.1", 443, "private address"},
		{"172.32.0.1", 443, ""},
		{"192.168.0.10", 443, "private address"},
		{"fc00::1", 443, "private address"},
		{"fd00::1", 443, ""},
		{"fd00::1", 444, "private address"},
		{"100.64.0.1", 443, "shared address space"},
		{"0.0.0.0", 80, "unspecified address"},
		{"93.184.216.34", 443, ""},
		{"example.com", 443, ""}, // names are checked by the addresses they resolve to
		{"localhost", 80, ""},    // ditto
		{"metadata.google.internal", 80, "cloud metadata host name"},
		{"Metadata.Google.Internal.", 80, "cloud metadata host name"},
		{"metadata", 80, "cloud metadata host name"},
		{"instance-data.ec2.internal", 80, "cloud metadata host name"},
		{"kubernetes", 443, "the cluster's API server"},
		{"kubernetes.default", 443, "the cluster's API server"},
		{"kubernetes.default.svc", 443, "the cluster's API server"},
		{"kubernetes.default.svc.cluster.local", 443, "the cluster's API server"},
		{"kubernetes.default.svc.cluster.local.", 443, "the cluster's API server"},
		{"198.51.100.7", 6443, "the cluster's API server"},
		{"198.51.100.7", 443, ""}, // the API server's address, another port: a public address
		{"2001:db8::7", 6443, ""},
		{"198.51.100.8", 443, ""},
		{"2001:db8::7", 443, "the cluster's API server"},
		{"api.cluster.example", 443, "the cluster's API server"},
		{"API.cluster.example", 443, "the cluster's API server"},
		{"203.0.113.10", 443, "the cluster's API server"}, // the API server name's address
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
			if !strings.Contains(refused.Reason, tt.want) {
				t.Errorf("reason %q, want it to contain %q", refused.Reason, tt.want)
			}
			if refused.Host != tt.host {
				t.Errorf("Host = %q, want %q", refused.Host, tt.host)
			}
			if !strings.Contains(err.Error(), "refused for a TeardownPolicy") || !strings.Contains(err.Error(), "--http-allowed-destinations") {
				t.Errorf("message %q does not say what to do", err)
			}
		})
	}
}

func TestCheckAddr(t *testing.T) {
	g := newGuard(Options{AllowedDestinations: []Destination{mustDest(t, "127.0.0.1:8443")}, Resolver: &staticResolver{}})
	tests := []struct {
		addr string
		port uint16
		want string
	}{
		{"127.0.0.1", 8443, ""},
		{"127.0.0.1", 8080, "loopback address"},
		{"::ffff:127.0.0.1", 8443, ""},
		{"::ffff:127.0.0.1", 1, "loopback address"},
		{"169.254.169.254", 80, "link-local"},
		{"fe80::1%eth0", 80, "link-local"},
		{"93.184.216.34", 80, ""},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			a := netip.MustParseAddr(tt.addr)
			err := g.checkAddr("name.example", a, tt.port)
			if tt.want == "" {
				if err != nil {
					t.Errorf("checkAddr = %v, want admitted", err)
				}
				return
			}
			var refused *RefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("checkAddr = %v, want a *RefusedError", err)
			}
			if !strings.Contains(refused.Reason, tt.want) {
				t.Errorf("reason %q, want %q", refused.Reason, tt.want)
			}
			if want := a.Unmap().WithZone(""); refused.Addr != want {
				t.Errorf("Addr = %s, want %s", refused.Addr, want)
			}
			if !strings.Contains(err.Error(), "name.example ("+refused.Addr.String()+")") {
				t.Errorf("message %q does not name both the host and the address", err)
			}
		})
	}
}

// countingServer is a loopback HTTP server that counts the connections it accepts.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func serverAddrPort(t *testing.T, srv *httptest.Server) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatalf("server address: %v", err)
	}
	return ap
}

func TestGuardDialRefusesLoopbackName(t *testing.T) {
	srv, conns := countingServer(t)
	ap := serverAddrPort(t, srv)
	res := &staticResolver{addrs: map[string][]netip.Addr{"evil.example": {netip.MustParseAddr("127.0.0.1")}}}
	g := newGuard(Options{Resolver: res})
	conn, err := g.dial(context.Background(), "tcp", net.JoinHostPort("evil.example", strconv.Itoa(int(ap.Port()))))
	if err == nil {
		_ = conn.Close()
		t.Fatalf("dial succeeded, want a refusal")
	}
	var refused *RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("dial error %v (%T), want a *RefusedError", err, err)
	}
	if refused.Host != "evil.example" || refused.Addr != netip.MustParseAddr("127.0.0.1") || refused.Reason != "loopback address" {
		t.Errorf("refusal %+v", refused)
	}
	if got := res.lookups(); len(got) != 1 {
		t.Errorf("lookups %q, want one", got)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the loopback server accepted %d connections", n)
	}
}

func TestGuardDialRefusedNameIsNotLookedUp(t *testing.T) {
	res := &staticResolver{addrs: map[string][]netip.Addr{"metadata.google.internal": {netip.MustParseAddr("93.184.216.34")}}}
	g := newGuard(Options{Resolver: res})
	_, err := g.dial(context.Background(), "tcp", "metadata.google.internal:80")
	var refused *RefusedError
	if !errors.As(err, &refused) || !strings.Contains(refused.Reason, "metadata") {
		t.Fatalf("dial error %v, want a metadata refusal", err)
	}
	if got := res.lookups(); len(got) != 0 {
		t.Errorf("lookups %q, want none", got)
	}
}

func TestGuardDialIPLiteral(t *testing.T) {
	srv, conns := countingServer(t)
	ap := serverAddrPort(t, srv)
	res := &staticResolver{}
	g := newGuard(Options{Resolver: res})
	if _, err := g.dial(context.Background(), "tcp", ap.String()); !errors.As(err, new(*RefusedError)) {
		t.Fatalf("dial %s = %v, want a refusal", ap, err)
	}
	g = newGuard(Options{Resolver: res, AllowedDestinations: []Destination{{Prefix: netip.PrefixFrom(ap.Addr(), 32), Port: ap.Port()}}})
	conn, err := g.dial(context.Background(), "tcp", ap.String())
	if err != nil {
		t.Fatalf("dial of the allowed %s: %v", ap, err)
	}
	_ = conn.Close()
	if got := res.lookups(); len(got) != 0 {
		t.Errorf("an address was looked up: %q", got)
	}
	if _, err := g.dial(context.Background(), "tcp", "127.0.0.1:notaport"); err == nil {
		t.Errorf("dial with a bad port succeeded")
	}
	if _, err := g.dial(context.Background(), "tcp", "127.0.0.1"); err == nil {
		t.Errorf("dial without a port succeeded")
	}
	deadline := time.Now().Add(time.Second)
	for conns.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("server accepted %d connections, want 1", n)
	}
}

func TestGuardDialSkipsRefusedAddresses(t *testing.T) {
	srv, conns := countingServer(t)
	ap := serverAddrPort(t, srv)
	// A trap on another loopback address and the same port: dialling the refused address would
	// reach it. Linux routes all of 127/8 to loopback; elsewhere the trap may not bind.
	var trapped atomic.Int32
	refusedAddr := netip.MustParseAddr("127.0.0.2")
	if ln, err := net.Listen("tcp", netip.AddrPortFrom(refusedAddr, ap.Port()).String()); err == nil {
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				trapped.Add(1)
				_ = c.Close()
			}
		}()
	} else {
		t.Logf("no trap on %s: %v", refusedAddr, err)
	}
	res := &staticResolver{addrs: map[string][]netip.Addr{"mixed.example": {refusedAddr, ap.Addr()}}}
	g := newGuard(Options{Resolver: res, AllowedDestinations: []Destination{{Prefix: netip.PrefixFrom(ap.Addr(), 32), Port: ap.Port()}}})
	conn, err := g.dial(context.Background(), "tcp", net.JoinHostPort("mixed.example", strconv.Itoa(int(ap.Port()))))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer func() { _ = conn.Close() }()
	if got := conn.RemoteAddr().String(); got != ap.String() {
		t.Errorf("connected to %s, want the allowed %s", got, ap)
	}
	if n := trapped.Load(); n != 0 {
		t.Errorf("the refused address %s was dialled %d times", refusedAddr, n)
	}
	if got := res.lookups(); len(got) != 1 || got[0] != "ip mixed.example" {
		t.Errorf("lookups %q, want one", got)
	}
	deadline := time.Now().Add(time.Second)
	for conns.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("allowed server accepted %d connections, want 1", n)
	}

	// The same name with the allowed address first and another port: refused, as the allow-list
	// names the port.
	_, err = g.dial(context.Background(), "tcp", net.JoinHostPort("mixed.example", strconv.Itoa(int(ap.Port())+1)))
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Addr != refusedAddr {
		t.Errorf("dial of another port = %v, want the first refusal (%s)", err, refusedAddr)
	}
}

func TestGuardDialFamily(t *testing.T) {
	res := &staticResolver{}
	g := newGuard(Options{Resolver: res})
	for _, network := range []string{"tcp", "tcp4", "tcp6"} {
		_, _ = g.dial(context.Background(), network, "nowhere.example:80")
	}
	want := []string{"ip nowhere.example", "ip4 nowhere.example", "ip6 nowhere.example"}
	if got := res.lookups(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("lookups %q, want %q", got, want)
	}
	res.addrs = map[string][]netip.Addr{"empty.example": nil}
	if _, err := g.dial(context.Background(), "tcp", "empty.example:80"); err == nil || !strings.Contains(err.Error(), "no addresses") {
		t.Errorf("dial of a name without addresses = %v", err)
	}
}

// rebindingResolver answers a public address the first time and loopback afterwards.
type rebindingResolver struct {
	calls atomic.Int32
}

func (r *rebindingResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	if r.calls.Add(1) == 1 {
		return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil // TEST-NET-1: not refused, not reachable
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

func TestGuardDialDNSRebinding(t *testing.T) {
	srv, conns := countingServer(t)
	ap := serverAddrPort(t, srv)
	res := &rebindingResolver{}
	g := newGuard(Options{Resolver: res})
	addr := net.JoinHostPort("rebind.example", strconv.Itoa(int(ap.Port())))

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	conn, err := g.dial(ctx, "tcp", addr)
	cancel()
	if err == nil {
		t.Fatalf("first dial connected to %s", conn.RemoteAddr())
	}
	if errors.As(err, new(*RefusedError)) {
		t.Errorf("first dial refused (%v): the public address passes the check", err)
	}
	if n := res.calls.Load(); n != 1 {
		t.Errorf("first dial looked up %d times, want 1", n)
	}

	conn, err = g.dial(context.Background(), "tcp", addr)
	if err == nil {
		_ = conn.Close()
		t.Fatalf("second dial connected to %s", conn.RemoteAddr())
	}
	if !errors.As(err, new(*RefusedError)) {
		t.Errorf("second dial = %v, want a refusal", err)
	}
	if n := res.calls.Load(); n != 2 {
		t.Errorf("two dials looked up %d times, want 2", n)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the loopback server accepted %d connections", n)
	}
}
