package policy

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/kvxds/kvxds/discovery/dns"
	dk "github.com/kvxds/kvxds/discovery/kubernetes"
)

type dnsSpec struct {
	DefRange hcl.Range      `hcl:",def_range"`
	Name     *hcl.Attribute `hcl:"name,optional"`
	Type     *hcl.Attribute `hcl:"type,optional"`
	Port     *hcl.Attribute `hcl:"port,optional"`
	Resolver *hcl.Attribute `hcl:"resolver,optional"`
	Refresh  *hcl.Attribute `hcl:"refresh,optional"`
	KeepFor  *hcl.Attribute `hcl:"keep_for,optional"`
}

type kubernetesSpec struct {
	DefRange     hcl.Range      `hcl:",def_range"`
	Namespace    *hcl.Attribute `hcl:"namespace,optional"`
	Service      *hcl.Attribute `hcl:"service,optional"`
	Port         *hcl.Attribute `hcl:"port,optional"`
	Kubeconfig   *hcl.Attribute `hcl:"kubeconfig,optional"`
	NodeLocality *hcl.Attribute `hcl:"node_locality,optional"`
}

// required reports a missing attribute at its block and says whether it
// is there.
func (d *decoder) required(a *hcl.Attribute, block hcl.Range, typ, name, example string) bool {
	if a == nil {
		d.errorf(block, "Missing "+name, "A %s block needs %s, as in %s.", typ, name, example)
		return false
	}
	return true
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
		if v, ok := d.str(a.Name, a.Expr); ok {
			switch t := strings.ToUpper(v); t {
			case dns.SRV, dns.A, dns.AAAA:
				s.Type = t
			default:
				d.errorf(a.Expr.Range(), "Unknown record type", `%q is not a record type kvxds looks up; use "SRV" (ports and weights from the records), "A" or "AAAA" (with port).`, v)
			}
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

func (d *decoder) kubernetes(spec *kubernetesSpec) dk.Config {
	var s dk.Config
	str := func(a *hcl.Attribute) string {
		if a == nil {
			return ""
		}
		v, _ := d.str(a.Name, a.Expr)
		return v
	}
	if d.required(spec.Namespace, spec.DefRange, "kubernetes", "namespace", `namespace = "llm"`) {
		s.Namespace = str(spec.Namespace)
	}
	if d.required(spec.Service, spec.DefRange, "kubernetes", "service", `service = "vllm"`) {
		s.Service = str(spec.Service)
	}
	if d.required(spec.Port, spec.DefRange, "kubernetes", "port", `port = "http" (the EndpointSlice port's name) or port = 8000`) {
		a := spec.Port
		v, diags := a.Expr.Value(nil)
		switch {
		case diags.HasErrors():
			d.add(diags)
		case v.Type() == cty.Number:
			if n, ok := d.uintIn(a.Name, a.Expr, 1, 65535, "Invalid port"); ok {
				s.Port = strconv.FormatUint(n, 10)
			}
		default:
			if p := str(a); p == "" {
				d.errorf(a.Expr.Range(), "Invalid port", `The port name is empty; use the EndpointSlice port's name, as in "http", or its number.`)
			} else {
				s.Port = p
			}
		}
	}
	s.Kubeconfig = str(spec.Kubeconfig)
	if a := spec.NodeLocality; a != nil {
		if v, ok := d.value(a.Name, a.Expr, cty.Bool, "true or false"); ok {
			s.NodeLocality = v.True()
		}
	}
	return s
}

// addrErr reports a parseHostPort error.
func (d *decoder) addrErr(rng hcl.Range, err error) {
	if ae, ok := err.(*addrError); ok {
		d.errorf(rng, ae.summary, "%s", ae.detail)
		return
	}
	d.errorf(rng, "Invalid address", "%s.", err)
}
