package translate

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kvxds/kvxds/xds/fleet"
	"github.com/kvxds/kvxds/xds/ringhash"
)

// RingEntriesPerWeight is how many entries of a proxyless gRPC client's
// ring each unit of endpoint weight gets.
//
// gRPC clients derive every endpoint's entry count from the ring size the
// cluster asks for and the endpoint's share of the total weight. With a
// fixed ring size, a replica leaving gives its entries to everyone else,
// and each new entry takes an arc, and its keys, from a replica that
// stayed. kvxds instead sizes each pool's ring to exactly this many
// entries per unit of the weight on the ring, so an endpoint whose weight
// is unchanged keeps exactly the same entries whatever the membership:
// only the keys of a replica that leaves move, and a replica that joins
// takes keys only for itself.
//
// 64 is the most that fits the clients' default ring cap (4,096) for 64
// replicas of weight 1; more entries would balance better (the largest
// share falls roughly as 1 + 2.5/sqrt(entries)), fewer would let larger
// pools keep the guarantee.
const RingEntriesPerWeight = 64

// GRPCRingSize is the ring size (minimum and maximum alike) that gives
// every unit of weight RingEntriesPerWeight entries when the endpoints on
// the ring weigh weight in all, within the clients' cap. It returns 0 for
// an empty ring (nothing to size).
//
// The size is one less than entries × weight on purpose: clients count
// entries cumulatively in floating point, and a target a fraction below
// each whole count (rather than exactly on it) makes every endpoint's
// count immune to rounding; only the last endpoint of the ring gets one
// entry less. When even one entry per unit of weight exceeds the cap, the
// ring is the cap, shared in proportion to weight, and membership changes
// move other keys again.
func GRPCRingSize(weight uint64) uint64 {
	if weight == 0 {
		return 0
	}
	k := min(RingEntriesPerWeight, (ringhash.DefaultCap+1)/weight)
	if k == 0 {
		return ringhash.DefaultCap
	}
	return k*weight - 1
}

// ringWeight is the weight gRPC clients put on p's ring: they use only
// HEALTHY (and UNKNOWN) endpoints.
func ringWeight(p *fleet.Pool) uint64 {
	var w uint64
	for i := range p.Endpoints {
		if p.Endpoints[i].Health == fleet.Healthy {
			w += uint64(p.Endpoints[i].Weight)
		}
	}
	return w
}

// grpcHashCluster is p's hash cluster for proxyless gRPC clients: the
// legacy lb_policy RING_HASH with ring_hash_lb_config, the one form in
// which both grpc-go and grpc-js read ring sizes (grpc-js rejects the
// typed RingHash's minimum_ring_size, a uint64 it receives as a string).
// The ring size follows the healthy weight, so this cluster changes with
// membership and health; gRPC clients ignore hash_balance_factor.
func grpcHashCluster(p *fleet.Pool) (*clusterv3.Cluster, error) {
	rh := &clusterv3.Cluster_RingHashLbConfig{HashFunction: clusterv3.Cluster_RingHashLbConfig_XX_HASH}
	if size := GRPCRingSize(ringWeight(p)); size != 0 {
		rh.MinimumRingSize = wrapperspb.UInt64(size)
		rh.MaximumRingSize = wrapperspb.UInt64(size)
	}
	c := &clusterv3.Cluster{
		Name:                 p.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LbPolicy:             clusterv3.Cluster_RING_HASH,
		LbConfig:             &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: rh},
	}
	if err := c.ValidateAll(); err != nil {
		return nil, err
	}
	return c, nil
}
