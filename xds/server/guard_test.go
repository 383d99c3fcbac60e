package server

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvxds/kvxds/fleet"
)

// bigFleet is one pool whose endpoint assignment is far larger than what
// gRPC buffers for a stream, so a client that does not read blocks the
// send of its first response.
func bigFleet(n int, weight uint32) fleet.Fleet {
	p := fleet.Pool{
		Name: "chat", Settings: fleet.Settings{
			Port: 10000,
			Hash: fleet.Hash{Algorithm: fleet.Maglev, BalanceFactor: 150, Keys: []fleet.HashKey{{Header: "x-session-id"}}},
		},
	}
	for i := range n {
		p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: 8000, Weight: weight})
	}
	return fleet.Fleet{Pools: []fleet.Pool{p}}
}

// A client that subscribes without reading does not delay the others, and its
// connection is dropped once a response has stayed unsent for the send
// timeout.
func TestClientThatDoesNotReadIsDropped(t *testing.T) {
	const timeout = 10 * time.Second
	reg := prometheus.NewRegistry()
	s := New(Options{Registerer: reg, SendTimeout: timeout})
	ctx := context.Background()
	if err := update(ctx, s, bigFleet(3000, 1)); err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(s.GRPCOptions()...)
	s.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(s.Listener(lis))
	t.Cleanup(g.Stop)

	dial := func(opts ...grpc.DialOption) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
		cc, err := grpc.NewClient(lis.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&discovery.DiscoveryRequest{Node: grpcNode(), TypeUrl: resourcev3.EndpointType}); err != nil {
			t.Fatal(err)
		}
		return stream
	}

	// The smallest windows gRPC allows (they also turn off its window
	// growth): the server can have at most a few tens of KiB in flight.
	slow := dial(grpc.WithInitialWindowSize(65535), grpc.WithInitialConnWindowSize(65535))
	// It goes on subscribing to other types and never reads: each type
	// is answered at once, and the second answer cannot be sent.
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.ListenerType} {
		if err := slow.Send(&discovery.DiscoveryRequest{Node: grpcNode(), TypeUrl: typ}); err != nil {
			t.Fatal(err)
		}
	}
	healthy := dial()
	in := receive(t, healthy.Recv)
	first, ok := next(in, 10*time.Second)
	if !ok {
		t.Fatal("healthy client got no endpoints")
	}
	if size := proto.Size(first); size < 160<<10 {
		t.Fatalf("response is %d bytes: too small to block a client that does not read", size)
	}
	version := first.GetVersionInfo()
	for w := uint32(2); w <= 3; w++ {
		if err := healthy.Send(&discovery.DiscoveryRequest{Node: grpcNode(), TypeUrl: resourcev3.EndpointType, VersionInfo: version, ResponseNonce: first.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if err := update(ctx, s, bigFleet(3000, w)); err != nil {
			t.Fatal(err)
		}
		got, ok := next(in, timeout)
		if !ok {
			t.Fatalf("weight %d: the healthy client got nothing", w)
		}
		// Had it waited on the client that does not read, it would have
		// got the update only once that one was dropped.
		if n := testutil.ToFloat64(s.metrics.dropped.WithLabelValues("slow_reader")); n != 0 {
			t.Fatalf("weight %d: the healthy client got the update only after the other was dropped", w)
		}
		if got.GetVersionInfo() == version {
			t.Fatalf("weight %d: same version %q again", w, version)
		}
		first, version = got, got.GetVersionInfo()
	}

	deadline := time.Now().Add(timeout + 5*time.Second)
	for testutil.ToFloat64(s.metrics.dropped.WithLabelValues("slow_reader")) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the client that does not read was not dropped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The stream ends: what reached the client before the drop (whole
	// small responses it never read) may still be handed out, then an
	// error, and never the response that was blocked.
	ended := make(chan error, 1)
	go func() {
		for {
			r, err := slow.Recv()
			if err != nil {
				ended <- err
				return
			}
			if r.GetTypeUrl() == resourcev3.EndpointType {
				ended <- fmt.Errorf("the blocked %d-byte endpoint response arrived after the drop", proto.Size(r))
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("the dropped client's stream: %v, want it unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the dropped client's stream still delivers")
	}
	if n := testutil.ToFloat64(s.metrics.dropped.WithLabelValues("slow_reader")); n != 1 {
		t.Fatalf("dropped %v connections, want only the slow one", n)
	}
	if n, err := testutil.GatherAndCount(reg, "kvxds_xds_streams_dropped_total"); err != nil || n != 1 {
		t.Fatalf("kvxds_xds_streams_dropped_total: %d series exported (%v)", n, err)
	}
	// The healthy stream is still served.
	if err := healthy.Send(&discovery.DiscoveryRequest{Node: grpcNode(), TypeUrl: resourcev3.EndpointType, VersionInfo: version, ResponseNonce: first.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if err := update(ctx, s, bigFleet(3000, 4)); err != nil {
		t.Fatal(err)
	}
	if _, ok := next(in, 5*time.Second); !ok {
		t.Fatal("the healthy client stopped receiving after the slow one was dropped")
	}
}

// The guard follows connections without wrapping them and forgets each
// one when gRPC closes it.
func TestGuardForgetsClosedConnections(t *testing.T) {
	s := New(Options{})
	if err := update(context.Background(), s, testFleet(1, 1)); err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(s.GRPCOptions()...)
	s.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(s.Listener(lis))
	t.Cleanup(g.Stop)
	tracked := func() int {
		s.guard.mu.Lock()
		defer s.guard.mu.Unlock()
		return len(s.guard.conns)
	}
	var conns []*grpc.ClientConn
	for range 5 {
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&discovery.DiscoveryRequest{Node: grpcNode(), TypeUrl: resourcev3.EndpointType}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cc)
	}
	if n := tracked(); n != 5 {
		t.Fatalf("%d connections tracked, want 5", n)
	}
	for _, cc := range conns {
		cc.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for tracked() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d closed connections still tracked", tracked())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
