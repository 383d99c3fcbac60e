package server

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/kvxds/kvxds/fleet"
)

// A push that changes a pool's Envoy Cluster and its assignment together
// (a ring sized by entries_per_weight, after a weight step) reaches Envoy
// as two responses in either order. Envoy replaces the cluster and keeps
// the new one warming until an assignment arrives after the Cluster; it
// asks for it with the version it already holds. Whatever the order, such
// an assignment must come, and promptly.
func TestWarmingEnvoyClusterGetsItsAssignment(t *testing.T) {
	f := testFleet(1, 2, 3)
	f.Pools[0].Hash = fleet.Hash{Algorithm: fleet.RingHash, EntriesPerWeight: 512, Keys: f.Pools[0].Hash.Keys}
	h := start(t, f)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(h.cc).StreamAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, stream.Recv)
	node := &core.Node{Id: "envoy-1", UserAgentName: "envoy"}
	names := []string{"chat", "code"}
	send := func(r *discovery.DiscoveryRequest) {
		t.Helper()
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType})
	send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: names})

	// Envoy's side: ACK everything; after a Cluster response, the
	// replaced cluster asks for its assignment again and warms until one
	// arrives.
	var edsVersion, edsNonce, cdsVersion string
	warming := false
	handle := func(r *discovery.DiscoveryResponse) {
		switch r.GetTypeUrl() {
		case resourcev3.ClusterType:
			first := cdsVersion == ""
			cdsVersion = r.GetVersionInfo()
			send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
			if !first {
				warming = true
				send(&discovery.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, VersionInfo: edsVersion, ResponseNonce: edsNonce, ResourceNames: names})
			}
		case resourcev3.EndpointType:
			edsVersion, edsNonce = r.GetVersionInfo(), r.GetNonce()
			warming = false
			send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: names})
		}
	}
	settle := func(what string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for !done() {
			r, ok := next(msgs, time.Until(deadline))
			if !ok {
				t.Fatalf("%s: cluster still warming (no assignment after Cluster %s)", what, cdsVersion)
			}
			handle(r)
		}
	}
	settle("start", func() bool { return cdsVersion != "" && edsVersion != "" })
	for i := range 12 {
		before := cdsVersion
		f.Pools[0].Endpoints[i%3].Weight = uint32(1 + (i+1)%4)
		if err := update(context.Background(), h.srv, f); err != nil {
			t.Fatal(err)
		}
		settle("weight step", func() bool { return cdsVersion != before && !warming })
	}
}
