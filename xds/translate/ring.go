package translate

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kvxds/kvxds/xds/fleet"
)

// grpcHashCluster is p's hash cluster for proxyless gRPC clients: the
// legacy lb_policy RING_HASH with ring_hash_lb_config, the one form in
// which both grpc-go and grpc-js read ring sizes (grpc-js rejects the
// typed RingHash's minimum_ring_size, a uint64 it receives as a string).
// The ring size follows the healthy weight, so this cluster changes with
// membership and health; gRPC clients ignore hash_balance_factor.
func grpcHashCluster(p *fleet.Pool, perWeight uint64) (*clusterv3.Cluster, error) {
	rh := &clusterv3.Cluster_RingHashLbConfig{HashFunction: clusterv3.Cluster_RingHashLbConfig_XX_HASH}
	if size := fleet.RingSize(fleet.RingWeight(p.Endpoints), perWeight, p.Hash.GRPCRingCap); size != 0 {
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
