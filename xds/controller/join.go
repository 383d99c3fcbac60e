package controller

import (
	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/xds/fleet"
	"github.com/kvxds/kvxds/xds/translate"
)

// StaticGroups returns the endpoints written in a policy as discovery
// groups, one per pool (a pool without a static block has an empty group).
func StaticGroups(p *policy.Policy) []discovery.Group {
	out := make([]discovery.Group, 0, len(p.Pools))
	for _, pool := range p.Pools {
		out = append(out, discovery.Group{Pool: pool.Name, Targets: staticTargets(pool)})
	}
	return out
}

func staticTargets(pool policy.Pool) discovery.Static {
	var ts discovery.Static
	for _, e := range pool.Static {
		ts = append(ts, discovery.Target{
			Host: e.Host, Port: e.Port, Weight: e.Weight, HashKey: e.HashKey,
			Region: e.Region, Zone: e.Zone, SubZone: e.SubZone,
		})
	}
	return ts
}

// Join builds the fleet model from a policy and the discovered targets of
// each pool. It is the only place where the inputs meet; the result is
// normalised.
func Join(p *policy.Policy, groups []discovery.Group) fleet.Fleet {
	targets := map[string][]discovery.Target{}
	for _, g := range groups {
		targets[g.Pool] = append(targets[g.Pool], g.Targets...)
	}
	f := fleet.Fleet{Pools: make([]fleet.Pool, 0, len(p.Pools))}
	for _, pp := range p.Pools {
		fp := fleet.Pool{
			Name:          pp.Name,
			ListenAddress: pp.ListenAddress,
			Port:          pp.Port,
			RouteTimeout:  pp.RouteTimeout,
			IdleTimeout:   pp.IdleTimeout,
			Balancer:      fleet.Balancer(pp.LoadBalancing),
			Hash: fleet.Hash{
				Algorithm:     fleet.Algorithm(pp.Hash.Algorithm),
				TableSize:     pp.Hash.TableSize,
				MinRingSize:   pp.Hash.MinRingSize,
				MaxRingSize:   pp.Hash.MaxRingSize,
				BalanceFactor: pp.Hash.BalanceFactor,
				Keyless:       fleet.Balancer(pp.Hash.Keyless),
				GRPCRingCap:   pp.Hash.GRPCRingCap,
			},
		}
		for _, k := range pp.Hash.Keys {
			fp.Hash.Keys = append(fp.Hash.Keys, fleet.HashKey{Header: k.Header, Cookie: k.Cookie, QueryParameter: k.QueryParameter})
		}
		for _, t := range targets[pp.Name] {
			health := fleet.Healthy
			if t.Draining {
				health = fleet.Draining
			}
			fp.Endpoints = append(fp.Endpoints, fleet.Endpoint{
				Host: t.Host, Port: t.Port, Weight: t.Weight, HashKey: t.HashKey,
				Health:   health,
				Locality: fleet.Locality{Region: t.Region, Zone: t.Zone, SubZone: t.SubZone},
			})
		}
		f.Pools = append(f.Pools, fp)
	}
	return f.Normalize()
}

// Render returns, as YAML, the resources a kind of client receives for a
// policy and its static endpoints (replicas its dns and kubernetes blocks
// would find are not looked up).
func Render(p *policy.Policy, flavor translate.Flavor) ([]byte, error) {
	r, err := translate.Translate(Join(p, StaticGroups(p)), flavor)
	if err != nil {
		return nil, err
	}
	return r.YAML()
}
