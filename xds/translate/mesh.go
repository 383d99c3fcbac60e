package translate

import (
	"cmp"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvxds/kvxds/xds/fleet"
)

// Istio's transport socket match: Istio gives every cluster of the mesh
// two transport sockets, mTLS for endpoints whose metadata carries
// envoy.transport_socket_match tlsMode = "istio" and plaintext for the
// others, so an endpoint without it would lose mTLS.
const (
	TransportSocketMatchKey = "envoy.transport_socket_match"
	IstioTLSModeKey         = "tlsMode"
	IstioTLSModeValue       = "istio"
)

// poolEndpoints returns p's ClusterLoadAssignment and, for a pool with a
// mesh cluster, the mesh's: the same endpoints, weights, health and
// localities under the mesh's cluster name, with Istio's transport socket
// match if asked for. Both carry the same envoy.lb hash keys, so the mesh's
// Envoys build the same Maglev table as kvxds's own.
func poolEndpoints(p *fleet.Pool, pl *fleet.Plan, kind Kind) ([]*endpointv3.ClusterLoadAssignment, error) {
	cla, err := buildEndpoints(poolView(p, pl, kind), kind)
	if err != nil {
		return nil, err
	}
	groups, err := groupEndpoints(p, pl, kind)
	if err != nil {
		return nil, err
	}
	out := append([]*endpointv3.ClusterLoadAssignment{cla}, groups...)
	if p.Mesh == nil {
		return out, nil
	}
	m, err := buildMeshEndpoints(p, kind)
	if err != nil {
		return nil, fmt.Errorf("mesh cluster %q: %w", p.Mesh.ClusterName, err)
	}
	return append(out, m), nil
}

func buildMeshEndpoints(p *fleet.Pool, kind Kind) (*endpointv3.ClusterLoadAssignment, error) {
	cla, err := buildEndpoints(p, kind)
	if err != nil {
		return nil, err
	}
	cla.ClusterName = p.Mesh.ClusterName
	if p.Mesh.IstioMTLS {
		// One Struct for every endpoint: resources are immutable.
		tls := &structpb.Struct{Fields: map[string]*structpb.Value{IstioTLSModeKey: structpb.NewStringValue(IstioTLSModeValue)}}
		for _, lle := range cla.GetEndpoints() {
			for _, e := range lle.GetLbEndpoints() {
				e.Metadata.FilterMetadata[TransportSocketMatchKey] = tls
			}
		}
	}
	if err := cla.ValidateAll(); err != nil {
		return nil, err
	}
	return cla, nil
}

// sortedAssignments flattens per-pool assignments, sorted by name like
// every other type.
func sortedAssignments(perPool [][]*endpointv3.ClusterLoadAssignment) []*endpointv3.ClusterLoadAssignment {
	out := slices.Concat(perPool...)
	slices.SortFunc(out, func(a, b *endpointv3.ClusterLoadAssignment) int {
		return cmp.Compare(a.GetClusterName(), b.GetClusterName())
	})
	return out
}

// meshClusters lists the mesh cluster names of a prepared fleet: the
// assignments no cluster of kvxds's own refers to.
func meshClusters(n *fleet.Fleet) []string {
	var names []string
	for i := range n.Pools {
		if m := n.Pools[i].Mesh; m != nil {
			names = append(names, m.ClusterName)
		}
	}
	slices.Sort(names)
	return names
}

// MeshCluster returns the Envoy cluster that takes pool's mesh assignment
// from eds, for an Envoy configured by something other than kvxds: named
// after the mesh cluster, of type EDS, balancing with the pool's
// load_balancing_policy exactly as kvxds's own Envoy cluster of the pool
// (Maglev with the same table size and balance factor, then ring hash).
// The cluster passes its ValidateAll.
func MeshCluster(m fleet.Model, pool string, eds *corev3.ConfigSource) (*clusterv3.Cluster, error) {
	if err := check(m, Envoy); err != nil {
		return nil, err
	}
	f := m.Fleet()
	i := slices.IndexFunc(f.Pools, func(p fleet.Pool) bool { return p.Name == pool })
	if i < 0 {
		return nil, fmt.Errorf("translate: no pool %q", pool)
	}
	p := &f.Pools[i]
	if p.Mesh == nil {
		return nil, fmt.Errorf("translate: pool %q has no mesh cluster", pool)
	}
	policies, err := lbPolicies(p)
	if err != nil {
		return nil, resErr(p, "mesh cluster", err)
	}
	c := &clusterv3.Cluster{
		Name:                 p.Mesh.ClusterName,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: eds},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LoadBalancingPolicy:  &clusterv3.LoadBalancingPolicy{Policies: policies},
	}
	if err := c.ValidateAll(); err != nil {
		return nil, resErr(p, "mesh cluster", err)
	}
	return c, nil
}

// MeshRouteHashPolicy returns the route hash policies of pool's key chain
// that an Envoy configured elsewhere can use on its route to the mesh
// cluster (header, cookie and query parameter keys; body keys need kvxds's
// own listener), each terminal as in kvxds's routes.
func MeshRouteHashPolicy(m fleet.Model, pool string) ([]*routev3.RouteAction_HashPolicy, error) {
	if err := check(m, Envoy); err != nil {
		return nil, err
	}
	f := m.Fleet()
	i := slices.IndexFunc(f.Pools, func(p fleet.Pool) bool { return p.Name == pool })
	if i < 0 {
		return nil, fmt.Errorf("translate: no pool %q", pool)
	}
	hp := hashPolicies(f.Pools[i].Hash.Keys)
	for _, h := range hp {
		if err := h.ValidateAll(); err != nil {
			return nil, fmt.Errorf("translate: pool %q: hash policy: %w", pool, err)
		}
	}
	return hp, nil
}
