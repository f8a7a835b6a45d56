package httpstep

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
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
	// Host is the host name or address the step named, as written.
	Host string
	// Addr is the refused address, when the refusal is of an address rather than a name.
	Addr netip.Addr
	// Reason says what the destination is.
	Reason string
	// Port is the refused port, when known (0 when not): the message suggests allowing the
	// address at that port only.
	Port uint16
}

// Error says what to do, which differs: an address can be allow-listed, a host name cannot
// (ParseDestination refuses names, as they can resolve anywhere).
func (e *RefusedError) Error() string {
	if !e.Addr.IsValid() {
		return fmt.Sprintf("destination %s refused for a TeardownPolicy: %s; host names cannot be allowed, so this one is always refused; "+
			"the step may call an address a cluster admin allows with --http-allowed-destinations instead", e.Host, e.Reason)
	}
	what := e.Host
	if e.Addr.String() != e.Host {
		what = fmt.Sprintf("%s (%s)", e.Host, e.Addr)
	}
	entry := Destination{Prefix: netip.PrefixFrom(e.Addr, e.Addr.BitLen()), Port: e.Port}
	return fmt.Sprintf("destination %s refused for a TeardownPolicy: %s; a cluster admin may allow the address by adding %s to the operator flag --http-allowed-destinations", what, e.Reason, entry)
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
