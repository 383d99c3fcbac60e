package translate

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/kvxds/kvxds/xds/fleet"
)

// Tenant hash groups.
//
// A group (fleet.Group) of pool P gets, for every kind:
//
//   - one route per value, before the pool's own routes, matching the
//     group's header exactly (string_match exact, which Envoy, grpc-go and
//     grpc-js read) and sending the request to cluster "P/group/NAME" with
//     the pool's hash policies, less any key on the group's own header:
//     that header is what selects the group, so within a single-value
//     group it would send every request to one replica. A request of the
//     group without a key is hashed on a random value (Envoy's and gRPC's
//     behaviour without a hash), so it never leaves the group's replicas;
//     a group has no keyless cluster;
//   - a cluster "P/group/NAME" shaped like the pool's hash cluster for the
//     kind (Maglev then ring hash for Envoy, the sized ring hash for
//     gRPC, with GroupEntriesPerWeight entries per unit of weight), over
//     its own ClusterLoadAssignment "P/group/NAME": the group's members
//     with their weights, health and hash keys.
//
// Members are chosen by rendezvous (highest-random-weight) hashing: every
// replica of the pool is ranked by xxhash64(group name + "\x00" +
// identity), highest first, and the group takes replicas in rank order
// until it holds Replicas healthy ones. A replica that is draining
// (saturated: the escape hatch), degraded or unhealthy keeps its place in
// the ranking and in the assignment, with its health, so it gets no new
// requests while the next-ranked healthy replica fills in; when it
// recovers it takes its place back and that replica leaves. A replica
// joining or leaving the pool changes the group only if it ranks among
// the group's members: at most one member in, one out. The ranking uses
// identities alone, not weights, so metric-driven weight changes never
// move membership (weights still apply inside the group). A pool with
// fewer healthy replicas than Replicas gives the group all of them.
//
// An exclusive group's members leave the pool's own assignment (and so
// its hash and keyless clusters), unless no healthy replica would be left
// there; the mesh assignment keeps the whole pool. grpc-js gets no group
// clusters: its groups' requests hash over the whole pool (see
// planGroups).

// rendezvousScore is an endpoint's weight in group's ranking.
func rendezvousScore(group, identity string) uint64 {
	return xxhash.Sum64String(group + "\x00" + identity)
}

// GroupMembers returns the members of g in the normalised pool p (hash
// key order): every replica ranked at or above g's Replicas-th healthy
// one, or all of them if fewer are healthy.
func GroupMembers(p *fleet.Pool, g fleet.Group) []fleet.Endpoint {
	type ranked struct {
		score uint64
		i     int
	}
	rs := make([]ranked, len(p.Endpoints))
	for i := range p.Endpoints {
		rs[i] = ranked{rendezvousScore(g.Name, p.Endpoints[i].HashKey), i}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(p.Endpoints[a.i].HashKey, p.Endpoints[b.i].HashKey))
	})
	var idx []int
	healthy := 0
	for _, r := range rs {
		if healthy == g.Replicas {
			break
		}
		idx = append(idx, r.i)
		if p.Endpoints[r.i].Health == fleet.Healthy {
			healthy++
		}
	}
	slices.Sort(idx)
	out := make([]fleet.Endpoint, len(idx))
	for j, i := range idx {
		out[j] = p.Endpoints[i]
	}
	return out
}

// groupPool is p restricted to members, under g's cluster name: what the
// group's cluster and assignment are built from.
func groupPool(p *fleet.Pool, g fleet.Group, members []fleet.Endpoint) *fleet.Pool {
	gp := *p
	gp.Name = g.ClusterName(p.Name)
	gp.Endpoints = members
	gp.Groups = nil
	gp.Mesh = nil
	return &gp
}

// groupPlan is how p's groups are served to a kind.
type groupPlan struct {
	// view is p as its own clusters and assignment see it.
	view *fleet.Pool
	// members are each group's members; served says whether a group has
	// a cluster of its own (else its routes go to the pool's cluster).
	members [][]fleet.Endpoint
	served  []bool
}

// planGroups returns how p's groups are served to kind.
//
// Envoy and gRPC: every group has its cluster, and the pool's own
// assignment leaves out the members of its exclusive groups, unless that
// leaves no healthy replica.
//
// grpc-js: no group has a cluster; the groups' routes go to the pool's
// cluster, over the whole pool. grpc-js cannot hold two ring hash
// clusters in one channel safely. It shares subchannels between them, and
// a ring hash stalls on an endpoint another cluster already connected
// (see keylessCluster). And its xDS client hands every cluster of the
// channel the whole configuration again for each changed resource, while
// its ring hash builds its ring from the first of two address lists it
// gets in one event-loop turn after forgetting the endpoints the second
// drops: one endpoint response that changes two clusters (a member
// draining changes both the group's and the pool's) throws an uncaught
// error in the client, which ends the process (@grpc/grpc-js-xds 1.14.1,
// load-balancer-ring-hash.js constructRing). With one cluster it never
// sees such a response, and its routes and clusters never follow
// membership.
func planGroups(p *fleet.Pool, kind Kind) groupPlan {
	plan := groupPlan{view: p, members: make([][]fleet.Endpoint, len(p.Groups)), served: make([]bool, len(p.Groups))}
	if len(p.Groups) == 0 || kind == GRPCJS {
		return plan
	}
	out := map[string]bool{}
	for i, g := range p.Groups {
		ms := GroupMembers(p, g)
		plan.members[i] = ms
		plan.served[i] = true
		if g.Exclusive {
			for _, e := range ms {
				out[e.HashKey] = true
			}
		}
	}
	var rest []fleet.Endpoint
	healthy := false
	for _, e := range p.Endpoints {
		if !out[e.HashKey] {
			rest = append(rest, e)
			healthy = healthy || e.Health == fleet.Healthy
		}
	}
	if healthy && len(rest) < len(p.Endpoints) {
		v := *p
		v.Endpoints = rest
		plan.view = &v
	}
	return plan
}

// WeightDomains returns, by identity, the replicas of the normalised pool
// p that serve only in one exclusive group's table (for Envoy and gRPC),
// each with that group's name: their weights divide that table alone, so
// relative weights measure them against each other (weights.StepDomains).
// Every other replica, including the members of groups that are not
// exclusive, serves in the pool's own table and is in the pool's domain,
// which this leaves out. grpc-js, which gets no group clusters, hashes
// over the whole pool with weights measured so.
func WeightDomains(p *fleet.Pool) map[string]string {
	plan := planGroups(p, Envoy)
	if plan.view == p {
		return nil // no exclusive group took a replica out
	}
	out := map[string]string{}
	for i, g := range p.Groups {
		if !g.Exclusive {
			continue
		}
		for _, e := range plan.members[i] {
			if _, taken := out[e.Identity()]; !taken {
				out[e.Identity()] = g.Name
			}
		}
	}
	return out
}

// RingTable is one hash table gRPC clients build for a pool: the pool's
// own, or a tenant group's (Cluster names it), over Endpoints, with
// PerWeight ring entries per unit of healthy weight.
type RingTable struct {
	Cluster   string
	Endpoints []fleet.Endpoint
	PerWeight uint64
}

// RingTables returns the hash tables grpc-go (and the other gRPC
// languages but grpc-js) build for the normalised pool p: the pool's own,
// without its exclusive groups' members, then each group's.
func RingTables(p *fleet.Pool) []RingTable {
	plan := planGroups(p, GRPC)
	out := []RingTable{{Cluster: p.Name, Endpoints: plan.view.Endpoints, PerWeight: EntriesPerWeight(p.Hash.GRPCRingCap)}}
	for i, g := range p.Groups {
		if plan.served[i] {
			out = append(out, RingTable{Cluster: g.ClusterName(p.Name), Endpoints: plan.members[i],
				PerWeight: GroupEntriesPerWeight(g.Replicas, g.MemberWeight, p.Hash.GRPCRingCap)})
		}
	}
	return out
}

// defaultView is p as its own clusters and assignment see it for kind.
func defaultView(p *fleet.Pool, kind Kind) *fleet.Pool {
	return planGroups(p, kind).view
}

// groupRoutes returns the routes of p's groups for kind, in group
// order, one per value; keys are the pool's route keys for the kind.
func groupRoutes(p *fleet.Pool, kind Kind, keys []fleet.HashKey) []*routev3.Route {
	if len(p.Groups) == 0 {
		return nil
	}
	plan := planGroups(p, kind)
	var routes []*routev3.Route
	for i, g := range p.Groups {
		inner := slices.DeleteFunc(slices.Clone(keys), func(k fleet.HashKey) bool { return k.Header == g.Header })
		hp := hashPolicies(inner)
		cluster := p.Name
		if plan.served[i] {
			cluster = g.ClusterName(p.Name)
		}
		for _, v := range g.Values {
			m := prefixMatch()
			m.Headers = []*routev3.HeaderMatcher{{
				Name: g.Header,
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v},
				}},
			}}
			routes = append(routes, &routev3.Route{Match: m, Action: routeAction(p, cluster, hp)})
		}
	}
	return routes
}

// groupResources returns the clusters and assignments of the groups plan
// serves.
func groupResources(p *fleet.Pool, kind Kind, plan groupPlan) ([]*clusterv3.Cluster, []*endpointv3.ClusterLoadAssignment, error) {
	var clusters []*clusterv3.Cluster
	var clas []*endpointv3.ClusterLoadAssignment
	for i, g := range p.Groups {
		if !plan.served[i] {
			continue
		}
		gp := groupPool(p, g, plan.members[i])
		var c *clusterv3.Cluster
		var err error
		if kind.proxyless() {
			c, err = grpcHashCluster(gp, GroupEntriesPerWeight(g.Replicas, g.MemberWeight, p.Hash.GRPCRingCap))
		} else {
			c, err = buildCluster(gp, gp.Name, "")
		}
		if err != nil {
			return nil, nil, fmt.Errorf("group %q: cluster: %w", g.Name, err)
		}
		cla, err := buildEndpoints(gp, kind)
		if err != nil {
			return nil, nil, fmt.Errorf("group %q: cluster load assignment: %w", g.Name, err)
		}
		clusters = append(clusters, c)
		clas = append(clas, cla)
	}
	return clusters, clas, nil
}

// groupClusters returns the clusters of p's groups for kind.
func groupClusters(p *fleet.Pool, kind Kind) ([]*clusterv3.Cluster, error) {
	c, _, err := groupResources(p, kind, planGroups(p, kind))
	return c, err
}

// groupEndpoints returns the assignments of p's groups for kind.
func groupEndpoints(p *fleet.Pool, kind Kind) ([]*endpointv3.ClusterLoadAssignment, error) {
	_, e, err := groupResources(p, kind, planGroups(p, kind))
	return e, err
}
