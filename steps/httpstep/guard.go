package httpstep

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Resolver looks up host names; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// guard decides which destinations a TeardownPolicy's requests may reach, and dials only
// addresses it has checked.
type guard struct {
	allowed  []Destination
	apiNames map[string]bool
	// apiAddrs are the API server's addresses and ports; port 0 stands for every port of an
	// address whose port could not be read.
	apiAddrs map[netip.AddrPort]bool
	resolver Resolver
	dialer   *net.Dialer
}

func newGuard(opts Options) *guard {
	g := &guard{
		allowed:  opts.AllowedDestinations,
		apiNames: map[string]bool{},
		apiAddrs: map[netip.AddrPort]bool{},
		resolver: opts.Resolver,
		dialer:   &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
	}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	for _, entry := range opts.APIServerHosts {
		h, port := apiServerEndpoint(entry)
		if h == "" {
			continue
		}
		if a, ok, _ := hostAddr(h); ok {
			g.apiAddrs[netip.AddrPortFrom(a.Unmap().WithZone(""), port)] = true
			continue
		}
		name := normalHost(h)
		g.apiNames[name] = true
		// The API server's addresses are learnt once; the name itself stays refused.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		addrs, _ := g.resolver.LookupNetIP(ctx, "ip", name)
		cancel()
		for _, a := range addrs {
			g.apiAddrs[netip.AddrPortFrom(a.Unmap().WithZone(""), port)] = true
		}
	}
	return g
}

// apiServerEndpoint reads an Options.APIServerHosts entry: a URL ("https://10.0.0.1:6443", as
// rest.Config.Host has it), host:port ("10.0.0.1:6443", "[fd00::1]:6443") or a host alone
// ("10.96.0.1", as KUBERNETES_SERVICE_HOST has it). A missing port is the scheme's, else 443,
// where API servers are reached in-cluster; a port that cannot be read is 0 (every port), so a
// typo refuses more, never less.
func apiServerEndpoint(entry string) (host string, port uint16) {
	entry = strings.TrimSpace(entry)
	portText, defPort := "", uint16(443)
	if u, err := url.Parse(entry); err == nil && u.Host != "" && strings.Contains(entry, "://") {
		host, portText = u.Hostname(), u.Port()
		if strings.EqualFold(u.Scheme, "http") {
			defPort = 80
		}
	} else if h, p, err := net.SplitHostPort(entry); err == nil {
		host, portText = h, p
	} else {
		host = entry // a host alone, an IPv6 address without brackets included
	}
	if portText == "" {
		return host, defPort
	}
	n, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return host, 0
	}
	return host, uint16(n)
}

func normalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}

// checkName refuses host names known to be bad without a lookup: cloud metadata services and the
// API server. Only addresses can be allowed, so these names are refused even when their address
// is allowed (use the address). An address, in any spelling hostAddr reads, is checked as an
// address; a host that looks numeric but is no address is refused; other names are checked by
// the addresses they resolve to.
func (g *guard) checkName(host string, port uint16) error {
	if a, ok, err := hostAddr(host); err != nil {
		return err
	} else if ok {
		return g.checkAddr(host, a, port)
	}
	h := normalHost(host)
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

// checkAddr refuses an address in a refused range, or the API server's address and port, unless
// it is allowed.
func (g *guard) checkAddr(host string, a netip.Addr, port uint16) error {
	a = a.Unmap().WithZone("")
	for _, d := range g.allowed {
		if d.admits(a, port) {
			return nil
		}
	}
	if g.apiAddrs[netip.AddrPortFrom(a, port)] || g.apiAddrs[netip.AddrPortFrom(a, 0)] {
		return &RefusedError{Host: host, Addr: a, Port: port, Reason: "the cluster's API server"}
	}
	if reason := refusedReason(a); reason != "" {
		return &RefusedError{Host: host, Addr: a, Port: port, Reason: reason}
	}
	return nil
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
	addrs, err := g.addrsOf(ctx, network, host)
	if err != nil {
		return nil, err
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

// addrsOf is the address an address host spells, or the addresses a host name resolves to.
func (g *guard) addrsOf(ctx context.Context, network, host string) ([]netip.Addr, error) {
	a, ok, err := hostAddr(host)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return []netip.Addr{a}, nil
	}
	family := "ip"
	switch network {
	case "tcp4":
		family = "ip4"
	case "tcp6":
		family = "ip6"
	}
	return g.resolver.LookupNetIP(ctx, family, host)
}
