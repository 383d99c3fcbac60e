package policy

import (
	"cmp"
	"net/netip"

	"github.com/hashicorp/hcl/v2"

	"github.com/kvxds/kvxds/fleet"
)

type staticSpec struct {
	DefRange  hcl.Range      `hcl:",def_range"`
	Endpoints *hcl.Attribute `hcl:"endpoints,optional"`
	Endpoint  []endpointSpec `hcl:"endpoint,block"`
}

func (s staticSpec) defRange() hcl.Range { return s.DefRange }

type endpointSpec struct {
	Address      string         `hcl:"address,label"`
	AddressRange hcl.Range      `hcl:"address,label_range"`
	Weight       *hcl.Attribute `hcl:"weight,optional"`
	HashKey      *hcl.Attribute `hcl:"hash_key,optional"`
	Region       *hcl.Attribute `hcl:"region,optional"`
	Zone         *hcl.Attribute `hcl:"zone,optional"`
	SubZone      *hcl.Attribute `hcl:"sub_zone,optional"`
}

// static decodes a static block into the fleet model's endpoints: a Host
// is an IP address in canonical form (without brackets), Weight is at
// least 1, and HashKey is empty for host:port.
func (d *decoder) static(spec *staticSpec) []fleet.Endpoint {
	var eps []fleet.Endpoint
	addrs := map[hostPort]hcl.Range{} // canonical address -> first occurrence
	ids := map[string]hcl.Range{}     // hash identity -> first occurrence

	// add registers an endpoint, rejecting a repeated address or identity.
	add := func(hp hostPort, addrRange hcl.Range, ep fleet.Endpoint, idRange hcl.Range) bool {
		if prev, dup := addrs[hp]; dup {
			d.errorf(addrRange, "Duplicate endpoint",
				"%s is already listed at line %d; list each endpoint once (an endpoint block can give it a weight).", hp, prev.Start.Line)
			return false
		}
		addrs[hp] = addrRange
		id := cmp.Or(ep.HashKey, hp.String())
		if prev, dup := ids[id]; dup {
			d.errorf(idRange, "Duplicate hash_key",
				"Hash key %q is already used at line %d; every endpoint needs its own identity on the hash ring.", id, prev.Start.Line)
			return false
		}
		ids[id] = idRange
		return true
	}

	if a := spec.Endpoints; a != nil {
		exprs, diags := hcl.ExprList(a.Expr)
		d.add(diags)
		for _, e := range exprs {
			hp, good := d.endpointAddress(e.Range(), "endpoints element", e)
			if !good {
				continue
			}
			ep := fleet.Endpoint{Host: hp.host, Port: hp.port, Weight: 1}
			if add(hp, e.Range(), ep, e.Range()) {
				eps = append(eps, ep)
			}
		}
	}

	for i := range spec.Endpoint {
		b := &spec.Endpoint[i]
		hp, addrOK := d.parseEndpointLabel(b.Address, b.AddressRange)
		good := addrOK
		ep := fleet.Endpoint{Host: hp.host, Port: hp.port, Weight: 1}
		idRange := b.AddressRange
		if a := b.Weight; a != nil {
			n, g := d.uintIn(a.Name, a.Expr, 1, fleet.MaxEndpointWeight, "Invalid weight")
			ep.Weight, good = uint32(n), good && g
		}
		if a := b.HashKey; a != nil {
			s, g := d.str(a.Name, a.Expr)
			if g && s == "" {
				d.errorf(a.Expr.Range(), "Invalid hash_key",
					"hash_key must not be empty; omit it to use the endpoint's host:port as its identity.")
				g = false
			}
			ep.HashKey, good, idRange = s, good && g, a.Expr.Range()
		}
		for _, f := range []struct {
			attr *hcl.Attribute
			dst  *string
		}{{b.Region, &ep.Locality.Region}, {b.Zone, &ep.Locality.Zone}, {b.SubZone, &ep.Locality.SubZone}} {
			if a := f.attr; a != nil {
				s, g := d.str(a.Name, a.Expr)
				*f.dst, good = s, good && g
			}
		}
		if addrOK && add(hp, b.AddressRange, ep, idRange) && good {
			eps = append(eps, ep)
		}
	}
	return eps
}

func (d *decoder) endpointAddress(rng hcl.Range, name string, e hcl.Expression) (hostPort, bool) {
	s, ok := d.str(name, e)
	if !ok {
		return hostPort{}, false
	}
	return d.parseEndpointLabel(s, rng)
}

func (d *decoder) parseEndpointLabel(s string, rng hcl.Range) (hostPort, bool) {
	hp, err := parseHostPort(s, false)
	if err != nil {
		ae := err.(*addrError)
		d.errorf(rng, ae.summary, "%s", ae.detail)
		return hostPort{}, false
	}
	// Envoy only accepts IP addresses in endpoint assignments, and a name
	// resolved once here would go stale.
	if _, err := netip.ParseAddr(hp.host); err != nil {
		d.errorf(rng, "Endpoint is not an IP address",
			"Static endpoints must be IP addresses, as in \"10.0.0.7:%d\"; %q is a name. Envoy only accepts IP addresses for endpoints.", hp.port, hp.host)
		return hostPort{}, false
	}
	return hp, true
}
