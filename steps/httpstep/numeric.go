package httpstep

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// invalidAddrError is a host written as an IPv4 number that spells no address. It is refused
// rather than looked up: it was meant as an address, and as a name it would go to DNS, where
// whoever answers picks the address.
type invalidAddrError struct {
	host, why string
}

func (e *invalidAddrError) Error() string {
	return fmt.Sprintf("destination %s refused: it is written as a number but is not a valid IPv4 address (%s), so it is not looked up as a host name either", e.host, e.why)
}

// hostAddr reads a URL's host as an IP address. Besides the usual IPv6 and dotted-decimal IPv4
// notations it reads every numeric IPv4 spelling inet_aton accepts ("2130706433", "0x7f.1",
// "0177.0.0.1"), since getaddrinfo, curl and browsers treat those as addresses too and a check
// that took them for names would pass them on to DNS. ok is false for a host name; err is an
// *invalidAddrError for a host that looks numeric but is no address.
func hostAddr(host string) (a netip.Addr, ok bool, err error) {
	// Not lower-cased: an IPv6 zone names an interface as written. Numbers ignore case anyway.
	h := strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return a, true, nil
	}
	parts := strings.Split(h, ".")
	for _, p := range parts {
		if !numericPart(p) {
			return netip.Addr{}, false, nil
		}
	}
	a, why := ipv4FromParts(parts)
	if why != "" {
		return netip.Addr{}, false, &invalidAddrError{host: host, why: why}
	}
	return a, true, nil
}

// numericPart reports whether p is written as a number: decimal digits, or 0x and hex digits.
// Octal is decimal digits with a leading 0, checked when the part is read.
func numericPart(p string) bool {
	digits, isDigit := p, func(c byte) bool { return '0' <= c && c <= '9' }
	if len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X') {
		digits = p[2:]
		isDigit = func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
	} else if p == "" {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if !isDigit(digits[i]) {
			return false
		}
	}
	return true
}

// ipv4FromParts assembles an address the way inet_aton does: 1 to 4 parts, each at most 255
// but the last, which fills the bytes left (a, a.b with b < 2^24, a.b.c with c < 2^16,
// a.b.c.d). why says what is wrong when the parts spell no address.
func ipv4FromParts(parts []string) (netip.Addr, string) {
	if len(parts) > 4 {
		return netip.Addr{}, fmt.Sprintf("%d parts, at most 4", len(parts))
	}
	var v uint64
	for i, p := range parts {
		n, err := partValue(p)
		if err != nil {
			return netip.Addr{}, fmt.Sprintf("%q: %v", p, err)
		}
		last := i == len(parts)-1
		limit := uint64(255)
		if last {
			limit = 1<<(8*(5-len(parts))) - 1
		}
		if n > limit {
			return netip.Addr{}, fmt.Sprintf("%s is more than %d", p, limit)
		}
		if last {
			v = v<<(8*(5-len(parts))) | n
		} else {
			v = v<<8 | n
		}
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), ""
}

// partValue reads one part: hex after 0x ("0x" alone is 0, as inet_aton has it), octal after a
// leading 0, decimal otherwise.
func partValue(p string) (uint64, error) {
	digits, base := p, 10
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		digits, base = p[2:], 16
		if digits == "" {
			return 0, nil
		}
	case len(p) >= 2 && p[0] == '0':
		digits, base = p[1:], 8
	}
	n, err := strconv.ParseUint(digits, base, 32)
	var ne *strconv.NumError
	switch {
	case errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange):
		return 0, errors.New("too large")
	case err != nil && base == 8:
		return 0, errors.New("not an octal number, as its leading 0 makes it")
	case err != nil:
		return 0, errors.New("not a number")
	}
	return n, nil
}

// dialNumeric dials through d, connecting a numeric IPv4 spelling of the host to the address it
// spells: Go's resolver would send it to DNS. It is the dialler of requests not checked by the
// guard (ClusterTeardownPolicies), so that a host means the same for both kinds of policy.
func dialNumeric(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return d.DialContext(ctx, network, addr)
		}
		a, ok, err := hostAddr(host)
		switch {
		case err != nil:
			return nil, err
		case ok:
			addr = net.JoinHostPort(a.String(), port)
		}
		return d.DialContext(ctx, network, addr)
	}
}
