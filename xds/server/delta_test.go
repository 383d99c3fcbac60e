package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/kvxds/kvxds/fleet"
)

// manyPools is n pools of four endpoints; pool i's endpoints weigh w[i]
// (1 where w is short).
func manyPools(n int, w map[int]uint32) fleet.Fleet {
	var f fleet.Fleet
	for i := range n {
		p := fleet.Pool{
			Name: fmt.Sprintf("pool-%03d", i), Settings: fleet.Settings{
				Port: 10000 + uint32(i),
				Hash: fleet.Hash{Algorithm: fleet.Maglev, BalanceFactor: 150, Keys: []fleet.HashKey{{Header: "x-session-id"}}},
			},
		}
		weight := w[i]
		if weight == 0 {
			weight = 1
		}
		for j := range 4 {
			p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: fmt.Sprintf("10.0.%d.%d", i, j+1), Port: 8000, Weight: weight})
		}
		f.Pools = append(f.Pools, p)
	}
	return f
}

// A delta client gets only the assignment that changed: a weight change
// in one pool of 100 does not re-send the other 99, to Envoy or to gRPC
// clients (whose ring size follows the pool's weight, so that pool's
// cluster comes too, and only it).
func TestDeltaSendsOnlyTheChangedPool(t *testing.T) {
	const pools = 100
	for _, tc := range []struct {
		name         string
		node         *core.Node
		clusters     int // clusters changed by the weight change
		clustersSeen int // clusters at first: pools and keyless
	}{
		{"envoy", &core.Node{Id: "envoy-delta", UserAgentName: "envoy"}, 0, 2 * pools},
		{"grpc", &core.Node{Id: "grpc-delta", UserAgentName: "gRPC Go"}, 1, 2 * pools},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, manyPools(pools, nil))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream, err := discovery.NewAggregatedDiscoveryServiceClient(h.cc).DeltaAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			msgs := receive(t, stream.Recv)
			first := map[string]int{}
			for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType} {
				req := &discovery.DeltaDiscoveryRequest{Node: tc.node, TypeUrl: typ}
				if typ == resourcev3.EndpointType {
					for i := range pools {
						req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, fmt.Sprintf("pool-%03d", i))
					}
				}
				if err := stream.Send(req); err != nil {
					t.Fatal(err)
				}
				resp, ok := next(msgs, 10*time.Second)
				if !ok {
					t.Fatalf("no %s response", shortType(typ))
				}
				first[resp.GetTypeUrl()] = len(resp.GetResources())
				if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
					t.Fatal(err)
				}
			}
			if first[resourcev3.ClusterType] != tc.clustersSeen || first[resourcev3.EndpointType] != pools {
				t.Fatalf("first responses: %d clusters and %d assignments, want %d and %d",
					first[resourcev3.ClusterType], first[resourcev3.EndpointType], tc.clustersSeen, pools)
			}

			if err := update(ctx, h.srv, manyPools(pools, map[int]uint32{42: 3})); err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for {
				resp, ok := next(msgs, 2*time.Second)
				if !ok {
					break
				}
				for _, r := range resp.GetResources() {
					got[resp.GetTypeUrl()] = append(got[resp.GetTypeUrl()], r.GetName())
					if resp.GetTypeUrl() == resourcev3.EndpointType {
						var cla endpointv3.ClusterLoadAssignment
						if err := r.GetResource().UnmarshalTo(&cla); err != nil {
							t.Fatal(err)
						}
						if w := cla.GetEndpoints()[0].GetLbEndpoints()[0].GetLoadBalancingWeight().GetValue(); w != 3 {
							t.Errorf("%s sent with weight %d, want 3", r.GetName(), w)
						}
					}
				}
				if len(resp.GetRemovedResources()) > 0 {
					t.Errorf("removed %v", resp.GetRemovedResources())
				}
				if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
					t.Fatal(err)
				}
			}
			if eds := got[resourcev3.EndpointType]; len(eds) != 1 || eds[0] != "pool-042" {
				t.Errorf("assignments sent after the change: %v, want only pool-042", eds)
			}
			if cds := got[resourcev3.ClusterType]; len(cds) != tc.clusters || (tc.clusters == 1 && cds[0] != "pool-042") {
				t.Errorf("clusters sent after the change: %v, want %d (pool-042)", cds, tc.clusters)
			}
		})
	}
}
