package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/kvxds/kvxds/discovery/dns"
)

// dnsSpec is a dns block: replicas from A, AAAA or SRV records, decoded
// into dns.Config.
type dnsSpec struct {
	DefRange hcl.Range      `hcl:",def_range"`
	Name     *hcl.Attribute `hcl:"name,optional"`
	Type     *hcl.Attribute `hcl:"type,optional"`
	Port     *hcl.Attribute `hcl:"port,optional"`
	Resolver *hcl.Attribute `hcl:"resolver,optional"`
	Refresh  *hcl.Attribute `hcl:"refresh,optional"`
	KeepFor  *hcl.Attribute `hcl:"keep_for,optional"`
}

func (d *decoder) dns(spec *dnsSpec) dns.Config {
	s := dns.Config{Type: dns.SRV, Refresh: dns.DefaultRefresh}
	if d.required(spec.Name, spec.DefRange, "dns", "name", `name = "vllm.service.consul"`) {
		if v, ok := d.str(spec.Name.Name, spec.Name.Expr); ok {
			if v = strings.TrimSuffix(v, "."); v == "" {
				d.errorf(spec.Name.Expr.Range(), "Invalid DNS name", `The name is empty; write the name to look up, as in "vllm.service.consul".`)
			}
			s.Name = strings.ToLower(v)
		}
	}
	if a := spec.Type; a != nil {
		if t, ok := enum(d, a, strings.ToUpper, "Unknown record type", func(v string) string {
			return fmt.Sprintf(`%q is not a record type kvxds looks up; use "SRV" (ports and weights from the records), "A" or "AAAA" (with port).`, v)
		}, dns.SRV, dns.A, dns.AAAA); ok {
			s.Type = t
		}
	}
	if a := spec.Port; a != nil {
		if n, ok := d.uintIn(a.Name, a.Expr, 1, 65535, "Invalid port"); ok {
			s.Port = uint32(n)
		}
	} else if s.Type != dns.SRV {
		d.errorf(spec.DefRange, "Missing port", "%s records carry no port; set the replicas' port, as in port = 8000.", s.Type)
	}
	if a := spec.Resolver; a != nil {
		if v, ok := d.str(a.Name, a.Expr); ok {
			if hp, err := parseHostPort(v, false); err != nil {
				d.addrErr(a.Expr.Range(), err)
			} else if _, err := netip.ParseAddr(hp.host); err != nil {
				d.errorf(a.Expr.Range(), "Invalid resolver", `The resolver must be an IP address and port, as in "127.0.0.1:8600", not %q: a name would need a resolver itself.`, v)
			} else {
				s.Resolver = hp.String()
			}
		}
	}
	if a := spec.Refresh; a != nil {
		if dur, ok := d.durationOr(a, dns.DefaultRefresh, ""); ok {
			if dur < dns.MinRefresh {
				d.errorf(a.Expr.Range(), "Invalid refresh", "refresh %s is too short; use at least %s.", dur, dns.MinRefresh)
			} else {
				s.Refresh = dur
			}
		}
	}
	if a := spec.KeepFor; a != nil {
		if dur, ok := d.durationOr(a, 0, ""); ok {
			if dur != 0 && dur < s.Refresh {
				d.errorf(a.Expr.Range(), "Invalid keep_for", "keep_for %s is shorter than refresh %s, so a single failed lookup would empty the pool; use at least the refresh interval.", dur, s.Refresh)
			} else {
				s.KeepFor = dur
			}
		}
	}
	return s
}
