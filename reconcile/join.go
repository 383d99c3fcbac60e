package reconcile

import (
	"slices"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/weights"
	"github.com/kvxds/kvxds/xds/translate"
)

// StaticTargets returns the endpoints written in a policy as discovered
// targets, one set per pool (empty for a pool without a static block).
func StaticTargets(p *policy.Policy) []discovery.PoolTargets {
	out := make([]discovery.PoolTargets, 0, len(p.Pools))
	for _, pool := range p.Pools {
		out = append(out, discovery.PoolTargets{Pool: pool.Name, Targets: pool.Static})
	}
	return out
}

// Join builds the fleet model from a policy, the discovered targets of
// each pool and the metric-driven decisions of each pool's replicas (by
// pool, then replica identity). It is the only place where the inputs
// meet. The result is not normalised: fleet.Prepare does that, once.
//
// A decision's weight multiplies the replica's static weight, and a
// saturated replica is draining, which takes it out of Envoy's and gRPC's
// hash tables for new requests while in-flight ones finish; a healthy one
// is marked Saturated, so that placements know it will be back.
func Join(p *policy.Policy, discovered []discovery.PoolTargets, decisions map[string]map[string]weights.Decision) fleet.Fleet {
	targets := map[string][]fleet.Endpoint{}
	for _, pt := range discovered {
		targets[pt.Pool] = append(targets[pt.Pool], pt.Targets...)
	}
	f := fleet.Fleet{Pools: make([]fleet.Pool, 0, len(p.Pools))}
	for _, pp := range p.Pools {
		fp := fleet.Pool{Name: pp.Name, Settings: pp.Settings}
		// Cloned: MemberWeight is set below, and the policy is shared.
		fp.Groups = slices.Clone(pp.Groups)
		for i := range fp.Groups {
			fp.Groups[i].MemberWeight = pp.MaxMultiplier()
		}
		dec := decisions[pp.Name]
		// Appending copied the targets, which the caller shares, so the
		// decisions apply in place.
		fp.Endpoints = targets[pp.Name]
		for i := range fp.Endpoints {
			e := &fp.Endpoints[i]
			if d, ok := dec[e.Identity()]; ok {
				if d.Weight > 0 {
					e.Weight = max(e.Weight, 1) * d.Weight
				}
				e.Cached = min(d.Cached, fleet.MaxCached)
				if d.Saturated {
					// Saturated only when that is all that takes it out:
					// a replica draining to leave still leaves.
					e.Saturated = e.Health == fleet.Healthy
					e.Health = fleet.Draining
				}
			}
		}
		f.Pools = append(f.Pools, fp)
	}
	return f
}

// Render returns, as YAML, the resources a kind of client receives for a
// policy and its static endpoints (replicas its dns and kubernetes blocks
// would find are not looked up).
func Render(p *policy.Policy, kind translate.Kind) ([]byte, error) {
	m, err := fleet.Prepare(Join(p, StaticTargets(p), nil))
	if err != nil {
		return nil, err
	}
	r, err := translate.Translate(m, kind)
	if err != nil {
		return nil, err
	}
	return r.YAML()
}
