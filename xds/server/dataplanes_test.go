package server

import (
	"context"
	"net"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"

	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/xds/bootstrap"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dataPlane(s *Server, node string) (status.DataPlane, bool) {
	for _, dp := range s.DataPlanes() {
		if dp.NodeID == node {
			return dp, true
		}
	}
	return status.DataPlane{}, false
}

// A real grpc-go xDS client shows up with the versions it accepted, the
// ones served to gRPC clients, and goes when it disconnects.
func TestDataPlaneGRPCGo(t *testing.T) {
	h := start(t, testFleet(1, 1))
	xdsAddr := h.cc.Target()
	cfg, err := bootstrap.GRPCJSON(bootstrap.Options{NodeID: "app-1", XDSAddress: xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	r, err := xds.NewXDSResolverWithConfigForTesting(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///chat", grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	cc.Connect()
	want := h.srv.Served()["grpc"]
	if len(want) != 4 {
		t.Fatalf("served to gRPC clients: %v, want four types", want)
	}
	waitFor(t, "the client to accept every type", func() bool {
		dp, ok := dataPlane(h.srv, "app-1")
		return ok && cmp.Equal(dp.ACKed, want)
	})
	dp, _ := dataPlane(h.srv, "app-1")
	host, _, _ := net.SplitHostPort(dp.Address)
	if dp.Kind != "grpc" || host != "127.0.0.1" || dp.Streams != 1 || dp.LastNACK != nil || dp.Connected.IsZero() {
		t.Errorf("data plane %+v: want a grpc client on 127.0.0.1, one ADS stream, no NACK", dp)
	}
	cc.Close()
	waitFor(t, "the client to be forgotten", func() bool {
		_, ok := dataPlane(h.srv, "app-1")
		return !ok
	})
}

// A client that rejects a configuration shows what it rejected and why.
func TestDataPlaneNACK(t *testing.T) {
	now := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	s := New(Options{Now: func() time.Time { return now }})
	if err := update(context.Background(), s, testFleet(1, 1)); err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	for _, tc := range []struct {
		name  string
		delta bool
	}{{"sotw", false}, {"delta", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			node := &core.Node{Id: "envoy-" + tc.name, UserAgentName: "envoy"}
			ads := discovery.NewAggregatedDiscoveryServiceClient(cc)
			var version string
			if tc.delta {
				stream, err := ads.DeltaAggregatedResources(ctx)
				if err != nil {
					t.Fatal(err)
				}
				msgs := receive(t, stream.Recv)
				if err := stream.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil {
					t.Fatal(err)
				}
				first, ok := next(msgs, 5*time.Second)
				if !ok {
					t.Fatal("no clusters sent")
				}
				version = first.GetSystemVersionInfo()
				if err := stream.Send(&discovery.DeltaDiscoveryRequest{
					TypeUrl: resourcev3.ClusterType, ResponseNonce: first.GetNonce(),
					ErrorDetail: &rpcstatus.Status{Code: 3, Message: "cluster chat: unknown field"},
				}); err != nil {
					t.Fatal(err)
				}
			} else {
				stream, err := ads.StreamAggregatedResources(ctx)
				if err != nil {
					t.Fatal(err)
				}
				msgs := receive(t, stream.Recv)
				if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil {
					t.Fatal(err)
				}
				first, ok := next(msgs, 5*time.Second)
				if !ok {
					t.Fatal("no clusters sent")
				}
				version = first.GetVersionInfo()
				if err := stream.Send(&discovery.DiscoveryRequest{
					TypeUrl: resourcev3.ClusterType, ResponseNonce: first.GetNonce(),
					ErrorDetail: &rpcstatus.Status{Code: 3, Message: "cluster chat: unknown field"},
				}); err != nil {
					t.Fatal(err)
				}
			}
			if version == "" {
				t.Fatal("the response carried no version")
			}
			want := &status.NACK{Type: "cds", Version: version, Message: "cluster chat: unknown field", Time: now}
			waitFor(t, "the NACK", func() bool {
				dp, ok := dataPlane(s, node.Id)
				return ok && dp.LastNACK != nil
			})
			dp, _ := dataPlane(s, node.Id)
			if diff := cmp.Diff(want, dp.LastNACK); diff != "" {
				t.Errorf("last NACK (-want +got):\n%s", diff)
			}
			if dp.Kind != "envoy" || dp.Delta != tc.delta || len(dp.ACKed) != 0 {
				t.Errorf("data plane %+v: want an envoy that accepted nothing", dp)
			}
			cancel()
			waitFor(t, "the stream to be forgotten", func() bool {
				_, ok := dataPlane(s, node.Id)
				return !ok
			})
		})
	}
}
