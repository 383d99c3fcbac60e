package policy

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/kvxds/kvxds/fleet"
)

// prefillSpec is a prefill block: the pool holding it is the decode side
// of prefill/decode disaggregation, pool names its prefill side. pool is
// required, but checked by hand so that the diagnostic names the pool.
type prefillSpec struct {
	DefRange     hcl.Range      `hcl:",def_range"`
	Pool         *hcl.Attribute `hcl:"pool,optional"`
	Header       *hcl.Attribute `hcl:"header,optional"`
	MinBodyBytes *hcl.Attribute `hcl:"min_body_bytes,optional"`
}

func (s prefillSpec) defRange() hcl.Range { return s.DefRange }

// prefillLink is a decoded prefill block, for the checks across pools.
type prefillLink struct {
	decode, prefill string
	rng             hcl.Range // the pool attribute's value
}

// poolPrefill decodes the prefill blocks of pool (at most one).
func (d *decoder) poolPrefill(spec *poolSpec, pool *Pool) {
	for i := range spec.Prefill {
		pf, rng, ok := d.prefill(&spec.Prefill[i], pool.Name)
		if i != 0 {
			continue
		}
		if ok {
			pool.Prefill = pf
		}
		// The link is checked even when the block has other errors.
		if pf.Pool != "" {
			d.prefills = append(d.prefills, prefillLink{decode: pool.Name, prefill: pf.Pool, rng: rng})
		}
	}
	atMostOne(d, spec.Prefill, "a", "prefill", fmt.Sprintf("Pool %q", pool.Name), "a decode pool has one prefill pool.")
	if pool.Prefill != nil && pool.Mesh != nil {
		d.warnf(spec.Prefill[0].DefRange, "Prefill header not set in the mesh",
			"Pool %q is served to a mesh's Envoys as endpoints only; they run the mesh's own listeners, not kvxds's Lua filters, so they name no prefill replica. Envoys that take the pool's listener from kvxds do.", pool.Name)
	}
}

// prefillNames are the pools the prefill blocks of pools name, where a
// name is a plain string; the blocks' own decoding reports the rest.
func prefillNames(pools []poolSpec) map[string]bool {
	names := map[string]bool{}
	for _, ps := range pools {
		for _, pf := range ps.Prefill {
			if pf.Pool == nil {
				continue
			}
			v, diags := pf.Pool.Expr.Value(nil)
			if !diags.HasErrors() && v.IsKnown() && !v.IsNull() && v.Type() == cty.String {
				names[v.AsString()] = true
			}
		}
	}
	return names
}

func (d *decoder) prefill(spec *prefillSpec, pool string) (*fleet.Prefill, hcl.Range, bool) {
	pf := &fleet.Prefill{Header: fleet.DefaultPrefillHeader}
	ok := true
	var rng hcl.Range
	if a := spec.Pool; a == nil {
		d.errorf(spec.DefRange, "Missing prefill pool",
			`The prefill block of pool %q needs pool, the name of the pool of its prefill replicas, as in pool = "%s-prefill": a decode pool without its prefill side has nothing to send requests to.`, pool, pool)
		ok = false
	} else if s, good := d.str(a.Name, a.Expr); !good {
		ok = false
	} else {
		pf.Pool, rng = s, a.Expr.Range()
	}
	if a := spec.Header; a != nil {
		if s, good := d.str(a.Name, a.Expr); !good {
			ok = false
		} else if err := fleet.CheckPrefillHeader(s); err != nil {
			d.errorf(a.Expr.Range(), "Invalid prefill header", "The %s.", err)
			ok = false
		} else {
			pf.Header = s
		}
	}
	if a := spec.MinBodyBytes; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, 0, 1<<30, "Invalid min_body_bytes"); good {
			pf.MinBodyBytes = int(n)
		} else {
			ok = false
		}
	}
	return pf, rng, ok
}

// checkPrefills checks each decode pool's link once every pool is decoded:
// the prefill pool exists, hashes (its keys pick the prefill replica), is
// not a decode pool itself, and shares no static replica with the decode
// pool (a replica has one role).
func (d *decoder) checkPrefills(pools []Pool) {
	byName := map[string]*Pool{}
	for i := range pools {
		if _, dup := byName[pools[i].Name]; !dup {
			byName[pools[i].Name] = &pools[i]
		}
	}
	for _, l := range d.prefills {
		dp, name := byName[l.decode], l.prefill
		pp, ok := byName[name]
		switch {
		case name == l.decode:
			d.errorf(l.rng, "Pool prefills on itself",
				"Pool %q names itself as its prefill pool; prefill and decode replicas are two pools: declare the prefill replicas in a pool of their own and name it here.", name)
		case !ok:
			d.errorf(l.rng, "Unknown prefill pool",
				"Pool %q names %q as its prefill pool, but no pool has that name; declare it, as in pool %q { port = ... hash { key { prompt_prefix = 4 } } ... }.", l.decode, name, name)
		case pp.Balancer != fleet.ConsistentHash:
			d.errorf(l.rng, "Prefill pool does not hash",
				"The prefill pool %q balances with %s, but its hash keys pick the prefill replica whose cache holds a request's prefix; make it a consistent-hashing pool (remove load_balancing).", name, pp.Balancer)
		case pp.Prefill != nil:
			d.errorf(l.rng, "Prefill pool is a decode pool",
				"The prefill pool %q has a prefill block of its own; a prefill pool computes prompts and names no other pool.", name)
		default:
			addrs := map[string]bool{}
			for _, e := range pp.Static {
				addrs[e.Address()] = true
			}
			for _, e := range dp.Static {
				if addrs[e.Address()] {
					d.errorf(l.rng, "Replica in both roles",
						"Replica %s is listed in pool %q (decode) and in its prefill pool %q; a replica either prefills or decodes: list it in one of them.", e.Address(), l.decode, name)
					break
				}
			}
		}
	}
}
