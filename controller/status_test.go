package controller

import (
	"context"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/xds/translate"
)

// GET /api/v1/status on the admin server of a running kvxds: its pool,
// the replicas it scrapes, and a data plane connected over ADS.
func TestStatusEndpoint(t *testing.T) {
	engines := []*engine{startEngine(t), startEngine(t)}
	engines[1].waiting.Store(50)
	r := startController(t, "kvxds-status", haPolicy(engines, ""), "")
	get := func() status.Status { return statusOf(t, r.c.AdminAddr()) }
	waitUntil(t, "the busy replica saturated in the status", func() bool {
		st := get()
		for _, rep := range st.Pools[0].Replicas {
			if rep.Address == engines[1].addr {
				return rep.Health == status.Saturated
			}
		}
		return false
	})

	// A data plane: an Envoy-like node on a raw ADS stream.
	cc, err := grpc.NewClient(r.c.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "envoy-1", UserAgentName: "envoy"}, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discovery.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the data plane's ACK in the status", func() bool {
		dps := get().DataPlanes
		return len(dps) == 1 && dps[0].ACKed["cds"] == resp.GetVersionInfo()
	})
	if dp := get().DataPlanes[0]; dp.NodeID != "envoy-1" || dp.Kind != "envoy" {
		t.Errorf("data plane %+v", dp)
	}
	st := get()
	if st.Instance.ID != "kvxds-status" || len(st.Served) != len(translate.Kinds) {
		t.Errorf("instance %+v, served %v", st.Instance, st.Served)
	}
	for _, rep := range st.Pools[0].Replicas {
		if rep.Source != "static" || rep.QueueDepth == nil || rep.TableShare == nil {
			t.Errorf("replica %+v: want a static replica with its queue and share", rep)
		}
		if rep.Address == engines[1].addr && rep.Reason != "queue depth 50 ≥ 10 and ≥ 2× its peers' mean" {
			t.Errorf("saturated replica's reason %q", rep.Reason)
		}
	}
}
