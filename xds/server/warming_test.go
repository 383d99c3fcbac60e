package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/adsenvoy"
	"github.com/kvxds/kvxds/xds/translate"
)

// A push that changes a pool's Envoy Cluster and its assignment together
// (a ring sized by entries_per_weight, after a weight step) reaches Envoy
// as two responses in either order; a policy edit changes the Cluster
// alone. Envoy replaces the cluster and keeps the new one warming until an
// assignment arrives after the Cluster. As its state-of-the-world mux does
// (envoyproxy/envoy: GrpcMuxImpl::addWatch and pause in
// source/extensions/config_subscription/grpc/grpc_mux_impl.cc,
// CdsApiHelper::onConfigUpdate, ClusterManagerImpl::updateClusterCounts),
// the new cluster's watch asks again for the assignments with the version
// and nonce it already holds, before the Cluster's ACK, which waits until
// no cluster warms. Whatever the order, an assignment must come, and
// promptly.
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

	// Envoy's side: after a Cluster response, the replaced cluster asks for
	// its assignment again and warms until one arrives; the Cluster's ACK
	// waits for that, and goes before the assignment's own ACK.
	var edsVersion, edsNonce, cdsVersion string
	var heldACK *discovery.DiscoveryRequest
	warming := false
	handle := func(r *discovery.DiscoveryResponse) {
		switch r.GetTypeUrl() {
		case resourcev3.ClusterType:
			first := cdsVersion == ""
			cdsVersion = r.GetVersionInfo()
			ack := &discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}
			if first {
				send(ack)
				return
			}
			warming = true
			send(&discovery.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, VersionInfo: edsVersion, ResponseNonce: edsNonce, ResourceNames: names})
			heldACK = ack
		case resourcev3.EndpointType:
			edsVersion, edsNonce = r.GetVersionInfo(), r.GetNonce()
			warming = false
			if heldACK != nil {
				send(heldACK)
				heldACK = nil
			}
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
		if i%4 == 3 {
			// A Cluster alone changes.
			f.Pools[0].Hash.BalanceFactor = 150 + uint32(i)
		} else {
			f.Pools[0].Endpoints[i%3].Weight = uint32(1 + (i+1)%4)
		}
		if err := update(context.Background(), h.srv, f); err != nil {
			t.Fatal(err)
		}
		settle("weight step", func() bool { return cdsVersion != before && !warming })
	}
}

// On a delta stream Envoy does not ask for a replaced cluster's assignment
// at all, and holds the Cluster's ACK while the cluster warms (see
// assignmentsAfter): the assignment must come unasked after every Cluster
// that changes, whether the push changed the assignment too (a weight step
// on a ring sized by entries_per_weight) or not (a policy edit).
func TestWarmingEnvoyClusterGetsItsAssignmentOnDelta(t *testing.T) {
	f := testFleet(1, 2, 3)
	f.Pools[0].Hash = fleet.Hash{Algorithm: fleet.RingHash, EntriesPerWeight: 512, Keys: f.Pools[0].Hash.Keys}
	h := start(t, f)
	sub, err := adsenvoy.SubscribeDelta(h.addr, &core.Node{Id: "envoy-delta", UserAgentName: "envoy"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	settle := func(what string) {
		t.Helper()
		want := h.srv.Versions(translate.Envoy)
		deadline := time.Now().Add(3 * time.Second)
		for {
			res, err := sub.Resources()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if res.Versions[resourcev3.ClusterType] == want[resourcev3.ClusterType] && len(res.Warming) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: clusters %v still warming (Cluster version %q, serving %q)",
					what, res.Warming, res.Versions[resourcev3.ClusterType], want[resourcev3.ClusterType])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	settle("start")
	for i := range 12 {
		if i%4 == 3 {
			// A Cluster alone changes.
			f.Pools[0].Hash.BalanceFactor = 150 + uint32(i)
		} else {
			f.Pools[0].Endpoints[i%3].Weight = uint32(1 + (i+1)%4)
		}
		if err := update(context.Background(), h.srv, f); err != nil {
			t.Fatal(err)
		}
		settle(fmt.Sprintf("step %d", i))
	}
	res, _ := sub.Resources()
	if len(res.Assignments) != 2 || len(res.Clusters) != 4 {
		t.Errorf("holds %d clusters and %d assignments, want 4 (pools and keyless) and 2", len(res.Clusters), len(res.Assignments))
	}
}

// An Envoy that reconnects names the assignments it holds, and the cache
// does not send them again: they count as held all the same, so a Cluster
// replaced afterwards still gets its assignment.
func TestWarmingAfterDeltaReconnect(t *testing.T) {
	f := testFleet(1, 2, 3)
	h := start(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(h.cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, stream.Recv)
	snap, err := h.srv.cache.GetSnapshot(translate.Envoy.String())
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for name, cla := range snap.GetResources(resourcev3.EndpointType) {
		b, err := cachev3.MarshalResource(cla)
		if err != nil {
			t.Fatal(err)
		}
		held[name] = cachev3.HashResource(b)
	}
	node := &core.Node{Id: "envoy-back", UserAgentName: "envoy"}
	for _, req := range []*discovery.DeltaDiscoveryRequest{
		{Node: node, TypeUrl: resourcev3.ClusterType},
		{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"chat", "code"}, InitialResourceVersions: held},
	} {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	f.Pools[0].Hash.BalanceFactor = 175
	got := map[string]int{}
	for i := 0; ; i++ {
		if i == 0 {
			// The Clusters as they are, then the edited one.
			r, ok := next(msgs, 3*time.Second)
			if !ok || r.GetTypeUrl() != resourcev3.ClusterType {
				t.Fatalf("first response %v, want the Clusters", r.GetTypeUrl())
			}
			if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}); err != nil {
				t.Fatal(err)
			}
			if err := update(ctx, h.srv, f); err != nil {
				t.Fatal(err)
			}
			continue
		}
		r, ok := next(msgs, 3*time.Second)
		if !ok {
			t.Fatalf("responses after the edit: %v; no assignment after the Cluster", got)
		}
		got[shortType(r.GetTypeUrl())]++
		if r.GetTypeUrl() == resourcev3.EndpointType {
			if got["cds"] == 0 {
				t.Fatalf("an assignment came before the edited Cluster")
			}
			if len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "chat" {
				t.Errorf("sent %d assignments after the Cluster, want chat alone", len(r.GetResources()))
			}
			return
		}
	}
}
