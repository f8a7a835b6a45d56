package httpstep

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Destination is an address range a TeardownPolicy may reach although it is refused by default.
type Destination struct {
	Prefix netip.Prefix
	// Port, when not 0, limits the destination to one port.
	Port uint16
}

// String formats d as ParseDestination reads it.
func (d Destination) String() string {
	p := d.Prefix.String()
	if d.Prefix.IsSingleIP() {
		p = d.Prefix.Addr().String()
	}
	if d.Port == 0 {
		return p
	}
	if d.Prefix.Addr().Is6() {
		return "[" + p + "]:" + strconv.Itoa(int(d.Port))
	}
	return p + ":" + strconv.Itoa(int(d.Port))
}

func (d Destination) admits(a netip.Addr, port uint16) bool {
	return d.Prefix.Contains(a) && (d.Port == 0 || d.Port == port)
}

// ParseDestination reads an IP address or CIDR range, optionally with a port:
// "10.0.0.0/8", "127.0.0.1:8443", "[fd00::/8]:443", "::1".
func ParseDestination(s string) (Destination, error) {
	s = strings.TrimSpace(s)
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return Destination{}, fmt.Errorf("%q: missing ]", s)
		}
		host, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if rest := s[end+1:]; rest != "" && (!strings.HasPrefix(rest, ":") || port == "") {
			return Destination{}, fmt.Errorf("%q: expected :port after ]", s)
		}
	case strings.Count(s, ":") == 1:
		host, port, _ = strings.Cut(s, ":")
		if port == "" {
			return Destination{}, fmt.Errorf("%q: the port is empty", s)
		}
	}
	var d Destination
	var err error
	if strings.Contains(host, "/") {
		d.Prefix, err = netip.ParsePrefix(host)
	} else {
		var a netip.Addr
		a, err = netip.ParseAddr(host)
		d.Prefix = netip.PrefixFrom(a, a.BitLen())
	}
	if err != nil {
		return Destination{}, fmt.Errorf("%q is not an IP address or CIDR range (host names cannot be allowed: they can resolve anywhere)", s)
	}
	// Addresses are checked unmapped (::ffff:10.0.0.1 is 10.0.0.1), so ranges are kept so too.
	if a := d.Prefix.Addr(); a.Is4In6() && d.Prefix.Bits() >= 96 {
		d.Prefix = netip.PrefixFrom(a.Unmap(), d.Prefix.Bits()-96)
	}
	d.Prefix = d.Prefix.Masked()
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return Destination{}, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
		}
		d.Port = uint16(n)
	}
	return d, nil
}

// RefusedError is returned for a destination a TeardownPolicy may not reach.
type RefusedError struct {
	// Host is the host name or address the step named.
	Host string
	// Addr is the refused address, when the refusal is of an address rather than a name.
	Addr netip.Addr
	// Reason says what the destination is.
	Reason string
}

func (e *RefusedError) Error() string {
	what := e.Host
	if e.Addr.IsValid() && e.Addr.String() != e.Host {
		what = fmt.Sprintf("%s (%s)", e.Host, e.Addr)
	}
	return fmt.Sprintf("destination %s refused for a TeardownPolicy: %s; a cluster admin may allow it with the operator flag --http-allowed-destinations", what, e.Reason)
}

type refusedRange struct {
	prefix netip.Prefix
	reason string
}

const reasonLinkLocal = "link-local address (cloud metadata services answer there)"

// refusedRanges are the address ranges a TeardownPolicy may not reach unless allowed.
var refusedRanges = func() []refusedRange {
	table := []struct{ cidr, reason string }{
		{"127.0.0.0/8", "loopback address"},
		{"::1/128", "loopback address"},
		{"169.254.0.0/16", reasonLinkLocal},
		{"fe80::/10", reasonLinkLocal},
		{"10.0.0.0/8", "private address"},
		{"172.16.0.0/12", "private address"},
		{"192.168.0.0/16", "private address"},
		{"fc00::/7", "private address"},
		{"100.64.0.0/10", "shared address space (carrier-grade NAT; some cloud metadata services answer there)"},
		{"0.0.0.0/8", "unspecified address (it reaches this host)"},
		{"::/128", "unspecified address (it reaches this host)"},
		{"192.0.0.0/24", "special-purpose address"},
		{"198.18.0.0/15", "special-purpose address"},
		{"224.0.0.0/4", "multicast address"},
		{"ff00::/8", "multicast address"},
		{"240.0.0.0/4", "reserved address"},
	}
	out := make([]refusedRange, len(table))
	for i, r := range table {
		out[i] = refusedRange{netip.MustParsePrefix(r.cidr), r.reason}
	}
	return out
}()

// IPv6 ranges that embed an IPv4 address, which is checked in their place.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// refusedNames are host names of cloud metadata services and of the cluster's API server, refused
// before any lookup.
var refusedNames = map[string]string{
	"metadata":                   "cloud metadata host name",
	"metadata.google.internal":   "cloud metadata host name",
	"metadata.goog":              "cloud metadata host name",
	"instance-data":              "cloud metadata host name",
	"instance-data.ec2.internal": "cloud metadata host name",
	"kubernetes":                 "the cluster's API server",
	"kubernetes.default":         "the cluster's API server",
	"kubernetes.default.svc":     "the cluster's API server",
}

// Resolver looks up host names; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// guard decides which destinations a TeardownPolicy's requests may reach, and dials only
// addresses it has checked.
type guard struct {
	allowed  []Destination
	apiNames map[string]bool
	apiAddrs map[netip.Addr]bool
	resolver Resolver
	dialer   *net.Dialer
}

func newGuard(opts Options) *guard {
	g := &guard{
		allowed:  opts.AllowedDestinations,
		apiNames: map[string]bool{},
		apiAddrs: map[netip.Addr]bool{},
		resolver: opts.Resolver,
		dialer:   &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
	}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	for _, h := range opts.APIServerHosts {
		h = normalHost(h)
		if h == "" {
			continue
		}
		if a, err := netip.ParseAddr(h); err == nil {
			g.apiAddrs[a.Unmap()] = true
			continue
		}
		g.apiNames[h] = true
		// The API server's addresses are learnt once; the name itself stays refused.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		addrs, _ := g.resolver.LookupNetIP(ctx, "ip", h)
		cancel()
		for _, a := range addrs {
			g.apiAddrs[a.Unmap()] = true
		}
	}
	return g
}

func normalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}

// checkName refuses host names known to be bad without a lookup: cloud metadata services and the
// API server. Only addresses can be allowed, so these names are refused even when their address
// is allowed (use the address). An IP literal is checked as an address; other names are checked
// by the addresses they resolve to.
func (g *guard) checkName(host string, port uint16) error {
	h := normalHost(host)
	if a, err := netip.ParseAddr(h); err == nil {
		return g.checkAddr(host, a, port)
	}
	reason, bad := refusedNames[h]
	switch {
	case bad:
	case strings.HasPrefix(h, "kubernetes.default.svc."), g.apiNames[h]:
		reason = "the cluster's API server"
	default:
		return nil
	}
	return &RefusedError{Host: host, Reason: reason}
}

// checkAddr refuses an address in a refused range unless it is allowed.
func (g *guard) checkAddr(host string, a netip.Addr, port uint16) error {
	a = a.Unmap().WithZone("")
	for _, d := range g.allowed {
		if d.admits(a, port) {
			return nil
		}
	}
	if g.apiAddrs[a] {
		return &RefusedError{Host: host, Addr: a, Reason: "the cluster's API server"}
	}
	if reason := refusedReason(a); reason != "" {
		return &RefusedError{Host: host, Addr: a, Reason: reason}
	}
	return nil
}

func refusedReason(a netip.Addr) string {
	if a.Is6() && (nat64.Contains(a) || sixToFour.Contains(a)) {
		b := a.As16()
		var v4 [4]byte
		if nat64.Contains(a) {
			copy(v4[:], b[12:16])
		} else {
			copy(v4[:], b[2:6])
		}
		if r := refusedReason(netip.AddrFrom4(v4)); r != "" {
			return r + " embedded in an IPv6 address"
		}
		return ""
	}
	for _, r := range refusedRanges {
		if r.prefix.Contains(a) {
			return r.reason
		}
	}
	return ""
}

// dial resolves addr's host once, refuses the call unless some address passes the checks, and
// dials only addresses that passed: a second lookup (DNS rebinding) is never made.
func (g *guard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port64, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", portText, err)
	}
	port := uint16(port64)
	if err := g.checkName(host, port); err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		family := "ip"
		switch network {
		case "tcp4":
			family = "ip4"
		case "tcp6":
			family = "ip6"
		}
		if addrs, err = g.resolver.LookupNetIP(ctx, family, host); err != nil {
			return nil, err
		}
	}
	var refused error
	var dialErrs []error
	for _, a := range addrs {
		if err := g.checkAddr(host, a, port); err != nil {
			if refused == nil {
				refused = err
			}
			continue
		}
		conn, err := g.dialer.DialContext(ctx, network, netip.AddrPortFrom(a.Unmap(), port).String())
		if err == nil {
			return conn, nil
		}
		dialErrs = append(dialErrs, err)
	}
	if len(dialErrs) > 0 {
		return nil, errors.Join(dialErrs...)
	}
	if refused != nil {
		return nil, refused
	}
	return nil, fmt.Errorf("lookup %s: no addresses", host)
}
