package policy

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// addrError is a problem with a host:port string, phrased for a diagnostic.
type addrError struct {
	summary string // "Invalid address" or "Invalid port"
	detail  string
}

func (e *addrError) Error() string { return e.summary + ": " + e.detail }

// hostPort is a parsed host:port.
type hostPort struct {
	host string // IP without brackets, or lower-cased DNS name; may be "" if allowed
	port uint32
}

// String returns the canonical host:port, bracketing IPv6 literals.
func (hp hostPort) String() string {
	return net.JoinHostPort(hp.host, strconv.FormatUint(uint64(hp.port), 10))
}

// overlaps says whether listeners on hp and o would need the same socket:
// the same port, on the same host or with either on every interface.
func (hp hostPort) overlaps(o hostPort) bool {
	return hp.port == o.port && (hp.host == o.host || hp.everywhere() || o.everywhere())
}

// everywhere says whether hp listens on every interface.
func (hp hostPort) everywhere() bool {
	ip, err := netip.ParseAddr(hp.host)
	return hp.host == "" || err == nil && ip.IsUnspecified()
}

// parseHostPort parses "host:port" where host is an IP literal (IPv6 in
// brackets) or a DNS name and port is 1..65535. IPs come back in canonical
// form and DNS names lower-cased, so that equal addresses compare equal.
// emptyHost allows ":port", which Go listeners read as "every interface".
func parseHostPort(s string, emptyHost bool) (hostPort, error) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		var detail string
		switch {
		case s == "":
			detail = `The address is empty; write host:port, as in "127.0.0.1:8001".`
		case strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "["):
			detail = fmt.Sprintf(`%q is not host:port; write IPv6 addresses in brackets, as in "[::1]:8001".`, s)
		case !strings.Contains(strings.TrimPrefix(s, "["), ":") || strings.HasSuffix(s, "]"):
			detail = fmt.Sprintf(`%q has no port; write host:port, as in "127.0.0.1:8001".`, s)
		default:
			detail = fmt.Sprintf(`%q is not host:port (%s); write it as in "127.0.0.1:8001" or "[::1]:8001".`, s, unwrapAddrErr(err))
		}
		return hostPort{}, &addrError{"Invalid address", detail}
	}
	port, err := strconv.ParseUint(portStr, 10, 64)
	if err != nil {
		return hostPort{}, &addrError{"Invalid port", fmt.Sprintf("Port %q in %q is not a number; use a port from 1 to 65535.", portStr, s)}
	}
	if port < 1 || port > 65535 {
		return hostPort{}, &addrError{"Invalid port", fmt.Sprintf("Port %d in %q is out of range; use 1 to 65535.", port, s)}
	}
	hp := hostPort{port: uint32(port)}
	switch {
	case host == "":
		if !emptyHost {
			return hostPort{}, &addrError{"Invalid address", fmt.Sprintf(`%q has no host; write host:port, as in "127.0.0.1:8001".`, s)}
		}
	case strings.HasPrefix(s, "["):
		// Brackets promise an IPv6 literal.
		ip, err := netip.ParseAddr(host)
		switch {
		case err != nil:
			return hostPort{}, &addrError{"Invalid address", fmt.Sprintf("%q in %q is not an IPv6 address.", host, s)}
		case ip.Is4():
			return hostPort{}, &addrError{"Invalid address", fmt.Sprintf("%q is an IPv4 address; write it without brackets, as in \"%s:%d\".", host, host, port)}
		case ip.Zone() != "":
			return hostPort{}, &addrError{"Invalid address", fmt.Sprintf("%q in %q has an IPv6 zone, which Envoy cannot use; remove %q.", host, s, "%"+ip.Zone())}
		}
		hp.host = ip.String()
	default:
		// Unbracketed, so not IPv6: SplitHostPort rejects "::1:80".
		if ip, err := netip.ParseAddr(host); err == nil {
			hp.host = ip.String()
		} else if err := checkDNSName(host); err != nil {
			return hostPort{}, &addrError{"Invalid address", fmt.Sprintf("Host %q in %q is neither an IP address nor a DNS name: %v.", host, s, err)}
		} else {
			hp.host = strings.ToLower(host)
		}
	}
	return hp, nil
}

// unwrapAddrErr drops the address that net.AddrError repeats.
func unwrapAddrErr(err error) string {
	if ae, ok := err.(*net.AddrError); ok {
		return ae.Err
	}
	return err.Error()
}

// checkDNSName accepts RFC 1123 host names (plus '_', which Docker and
// service-discovery names use), with an optional trailing dot.
func checkDNSName(name string) error {
	n := strings.TrimSuffix(name, ".")
	if n == "" {
		return fmt.Errorf("empty name")
	}
	if len(n) > 253 {
		return fmt.Errorf("longer than 253 characters")
	}
	labels := strings.Split(n, ".")
	for _, l := range labels {
		if l == "" {
			return fmt.Errorf("empty label")
		}
		if len(l) > 63 {
			return fmt.Errorf("label %q is longer than 63 characters", l)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with '-'", l)
		}
		for _, c := range l {
			if !isAlnum(c) && c != '-' && c != '_' {
				return fmt.Errorf("%q is not allowed", c)
			}
		}
	}
	// No top-level domain is numeric: "10.0.0.300" is a broken IPv4
	// address, not a host name.
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return fmt.Errorf("it looks like an IPv4 address but is not a valid one")
	}
	return nil
}

func isAlnum(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// parseListenAddress parses an IP literal to listen on; brackets around an
// IPv6 literal are tolerated.
func parseListenAddress(s string) (netip.Addr, error) {
	t := s
	if strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") {
		t = t[1 : len(t)-1]
	}
	ip, err := netip.ParseAddr(t)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, fmt.Errorf(`%q is not an IP address; Envoy listens on an IP, such as "0.0.0.0", "127.0.0.1" or "::"`, s)
	}
	return ip, nil
}
