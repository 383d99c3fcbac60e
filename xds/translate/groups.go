package translate

import (
	"fmt"
	"slices"

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
// Members are chosen by the model (fleet.GroupMembers, fleet.Plan): the
// same for every kind, computed once per push. An exclusive group's
// members leave the pool's own assignment (and so its hash and keyless
// clusters), unless no healthy replica would be left there; the mesh
// assignment keeps the whole pool. grpc-js gets no group clusters: its
// groups' requests hash over the whole pool (see groupTables).

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

// groupTables reports whether kind gets the groups' own clusters and
// assignments.
//
// Envoy and gRPC: every group has its cluster, and the pool's own
// assignment leaves out the members of its exclusive groups, unless that
// leaves no healthy replica (fleet.Plan).
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
func groupTables(kind Kind) bool { return kind != GRPCJS }

// poolView is p as its own clusters and assignment see it for kind: the
// plan's own table, or the whole pool for a kind without group tables.
func poolView(p *fleet.Pool, pl *fleet.Plan, kind Kind) *fleet.Pool {
	if !groupTables(kind) || len(pl.Endpoints) == len(p.Endpoints) {
		return p
	}
	v := *p
	v.Endpoints = pl.Endpoints
	return &v
}

// groupRoutes returns the routes of p's groups for kind, in group
// order, one per value; keys are the pool's route keys for the kind.
func groupRoutes(p *fleet.Pool, kind Kind, keys []fleet.HashKey) []*routev3.Route {
	if len(p.Groups) == 0 {
		return nil
	}
	var routes []*routev3.Route
	for _, g := range p.Groups {
		inner := slices.DeleteFunc(slices.Clone(keys), func(k fleet.HashKey) bool { return k.Header == g.Header })
		hp := hashPolicies(inner)
		cluster := p.Name
		if groupTables(kind) {
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

// groupResources returns the clusters and assignments of p's groups for
// kind.
func groupResources(p *fleet.Pool, pl *fleet.Plan, kind Kind) ([]*clusterv3.Cluster, []*endpointv3.ClusterLoadAssignment, error) {
	if !groupTables(kind) {
		return nil, nil, nil
	}
	var clusters []*clusterv3.Cluster
	var clas []*endpointv3.ClusterLoadAssignment
	for i, g := range p.Groups {
		gp := groupPool(p, g, pl.Groups[i].Members)
		var c *clusterv3.Cluster
		var err error
		if kind.proxyless() {
			c, err = grpcHashCluster(gp, pl.Groups[i].PerWeight)
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
func groupClusters(p *fleet.Pool, pl *fleet.Plan, kind Kind) ([]*clusterv3.Cluster, error) {
	c, _, err := groupResources(p, pl, kind)
	return c, err
}

// groupEndpoints returns the assignments of p's groups for kind.
func groupEndpoints(p *fleet.Pool, pl *fleet.Plan, kind Kind) ([]*endpointv3.ClusterLoadAssignment, error) {
	_, e, err := groupResources(p, pl, kind)
	return e, err
}
