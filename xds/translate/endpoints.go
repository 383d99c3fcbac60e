package translate

import (
	"cmp"
	"fmt"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kvxds/kvxds/fleet"
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

var healthStatus = [...]corev3.HealthStatus{
	fleet.Healthy:   corev3.HealthStatus_HEALTHY,
	fleet.Draining:  corev3.HealthStatus_DRAINING,
	fleet.Degraded:  corev3.HealthStatus_DEGRADED,
	fleet.Unhealthy: corev3.HealthStatus_UNHEALTHY,
}

// buildEndpoints groups p's endpoints by locality (gRPC requires every
// endpoint to be in a locality, and each locality once per priority).
// Localities are sorted; inside one, endpoints keep the normalised (hash
// key) order.
//
// Each endpoint carries its identity as envoy.lb hash_key metadata: Envoy's
// Maglev and ring hash and gRPC's ring hash (gRFC A76) then place it on the
// ring by identity, not by address, so every client builds the same table
// and a replica that moves keeps its keys.
//
// A locality's weight is the sum of its endpoints' weights. Envoy's
// consistent hashing ignores locality weights (locality_weighted_lb_config
// is not set), so each endpoint's share is weight/total, and Envoy keeps
// the pool's real localities.
//
// Proxyless gRPC clients get the whole pool as one locality: the zones'
// locality if they share one, else an empty one. gRPC implementations
// combine locality and endpoint weights two ways (xds/ringhash.Arithmetic):
// C-core, grpc-java, grpc-js and grpc-go before gRFC A113 multiply them,
// grpc-go since A113 multiplies the locality's share by the endpoint's
// share of its locality. No locality weights mean the same to both over
// zones of unequal size; with one locality both give each endpoint
// weight/total, so every client builds the same ring. The keyless
// clusters over the same assignment are round robin or least request,
// which pick a locality by weight and then an endpoint regardless of its
// weight: with one locality every replica gets an equal share of keyless
// requests, whatever the zones.
func buildEndpoints(p *fleet.Pool, kind Kind) (*endpointv3.ClusterLoadAssignment, error) {
	// Bucket endpoints by locality. Pools have few localities: scan a
	// slice, and switch to a map if there are many.
	var locs []fleet.Locality
	var byLoc map[fleet.Locality]int
	idx := make([]int, len(p.Endpoints)) // endpoint -> bucket
	one, merged := oneLocality(p, kind)
	for i := range p.Endpoints {
		l := p.Endpoints[i].Locality
		if merged {
			l = one
		}
		var b int
		if byLoc != nil {
			var ok bool
			if b, ok = byLoc[l]; !ok {
				b = -1
			}
		} else {
			b = slices.Index(locs, l)
		}
		if b < 0 {
			b = len(locs)
			locs = append(locs, l)
			if byLoc != nil {
				byLoc[l] = b
			} else if len(locs) > 16 {
				byLoc = make(map[fleet.Locality]int)
				for j, l := range locs {
					byLoc[l] = j
				}
			}
		}
		idx[i] = b
	}
	order := make([]int, len(locs)) // sorted position -> bucket
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmpLocality(locs[a], locs[b]) })

	// Allocate the messages of all endpoints in a few slabs: this path runs
	// on every weight or health change.
	n := len(p.Endpoints)
	var (
		lbEps   = make([]endpointv3.LbEndpoint, n)
		hostIDs = make([]endpointv3.LbEndpoint_Endpoint, n)
		eps     = make([]endpointv3.Endpoint, n)
		addrs   = make([]corev3.Address, n)
		sockets = make([]corev3.Address_SocketAddress, n)
		sas     = make([]corev3.SocketAddress, n)
		ports   = make([]corev3.SocketAddress_PortValue, n)
		weights = make([]wrapperspb.UInt32Value, n)
		mds     = make([]corev3.Metadata, n)
		structs = make([]structpb.Struct, n)
		values  = make([]structpb.Value, n)
		strs    = make([]structpb.Value_StringValue, n)
	)
	lles := make([]endpointv3.LocalityLbEndpoints, len(locs))
	llocs := make([]corev3.Locality, len(locs))
	lweights := make([]wrapperspb.UInt32Value, len(locs))
	cla := &endpointv3.ClusterLoadAssignment{
		ClusterName: p.Name,
		Endpoints:   make([]*endpointv3.LocalityLbEndpoints, len(locs)),
	}
	pos := make([]int, len(locs)) // bucket -> sorted position
	for i, b := range order {
		pos[b] = i
		l := locs[b]
		llocs[i] = corev3.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone}
		lles[i].Locality = &llocs[i]
		cla.Endpoints[i] = &lles[i]
	}
	sums := make([]uint32, len(locs)) // fits: prepare checked the pool total
	for i := range p.Endpoints {
		e := &p.Endpoints[i]
		ports[i].PortValue = e.Port
		sas[i] = corev3.SocketAddress{Protocol: corev3.SocketAddress_TCP, Address: e.Host, PortSpecifier: &ports[i]}
		sockets[i].SocketAddress = &sas[i]
		addrs[i].Address = &sockets[i]
		eps[i].Address = &addrs[i]
		hostIDs[i].Endpoint = &eps[i]
		weights[i].Value = e.Weight
		strs[i].StringValue = e.HashKey
		values[i].Kind = &strs[i]
		structs[i].Fields = map[string]*structpb.Value{"hash_key": &values[i]}
		mds[i].FilterMetadata = map[string]*structpb.Struct{"envoy.lb": &structs[i]}
		lbEps[i] = endpointv3.LbEndpoint{
			HostIdentifier:      &hostIDs[i],
			HealthStatus:        healthStatus[e.Health],
			LoadBalancingWeight: &weights[i],
			Metadata:            &mds[i],
		}
		k := pos[idx[i]]
		lles[k].LbEndpoints = append(lles[k].LbEndpoints, &lbEps[i])
		sums[k] += e.Weight
	}
	for i := range lles {
		lweights[i].Value = sums[i]
		lles[i].LoadBalancingWeight = &lweights[i]
	}
	if err := cla.ValidateAll(); err != nil {
		return nil, err
	}
	return cla, nil
}

// oneLocality says whether kind gets p's endpoints as one locality, and
// which: their own if they share one, else the empty locality.
func oneLocality(p *fleet.Pool, kind Kind) (fleet.Locality, bool) {
	if !kind.proxyless() || len(p.Endpoints) == 0 {
		return fleet.Locality{}, false
	}
	l := p.Endpoints[0].Locality
	for i := range p.Endpoints {
		if p.Endpoints[i].Locality != l {
			return fleet.Locality{}, true
		}
	}
	return l, true
}

func cmpLocality(a, b fleet.Locality) int {
	return cmp.Or(
		cmp.Compare(a.Region, b.Region),
		cmp.Compare(a.Zone, b.Zone),
		cmp.Compare(a.SubZone, b.SubZone),
	)
}

// groupEndpoints returns the assignments of p's groups and adapters for
// kind: each table's members with their weights, health and hash keys.
func groupEndpoints(p *fleet.Pool, pl *fleet.Plan, kind Kind) ([]*endpointv3.ClusterLoadAssignment, error) {
	if !groupTables(kind) || !servesTables(p, kind) {
		return nil, nil
	}
	var clas []*endpointv3.ClusterLoadAssignment
	for _, t := range pl.Tables() {
		cla, err := buildEndpoints(groupPool(p, t.Cluster, t.Members), kind)
		if err != nil {
			return nil, fmt.Errorf("table %q: cluster load assignment: %w", t.Cluster, err)
		}
		clas = append(clas, cla)
	}
	return clas, nil
}

// Istio's transport socket match: Istio gives every cluster of the mesh
// two transport sockets, mTLS for endpoints whose metadata carries
// envoy.transport_socket_match tlsMode = "istio" and plaintext for the
// others, so an endpoint without it would lose mTLS.
const (
	TransportSocketMatchKey = "envoy.transport_socket_match"
	IstioTLSModeKey         = "tlsMode"
	IstioTLSModeValue       = "istio"
)

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
