package server

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvxds/kvxds/fleet"
)

// loadFleet is one pool of n replicas whose Envoys pick replicas on
// prompt bytes with its load observed (the default of a prompt_prefix
// key), its figures counted at the given step.
func loadFleet(n, step int) fleet.Fleet {
	f := bigFleet(n, 1)
	p := &f.Pools[0]
	p.Hash.BalanceOn, p.Hash.LoadInterval = fleet.BalanceOnPromptBytes, fleet.DefaultLoadInterval
	p.LoadAt = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC).Add(time.Duration(step) * time.Second)
	for i := range p.Endpoints {
		e := &p.Endpoints[i]
		e.HashKey = fmt.Sprintf("vllm-%d", i)
		e.InFlightBytes = uint64(100_000 + 7_919*((i+step)%97))
		e.Cached = uint8(i % 16)
	}
	return f
}

// BenchmarkLoadPushFanout is one load push of a pool of 100 replicas
// that bounds prompt bytes (its route configuration, with its pick
// table, changes at every load interval) to N Envoy-like SotW streams
// subscribed to it, from the update until every stream has received the
// new routes and acknowledged them. route-bytes is the route
// configuration each stream is sent.
func BenchmarkLoadPushFanout(b *testing.B) {
	for _, streams := range []int{100, 1000} {
		b.Run(fmt.Sprintf("%d_streams", streams), func(b *testing.B) {
			s := New(Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			models := [2]fleet.Model{prepared(b, loadFleet(100, 0)), prepared(b, loadFleet(100, 1))}
			if err := s.Update(ctx, models[0]); err != nil {
				b.Fatal(err)
			}
			g := grpc.NewServer(s.GRPCOptions()...)
			s.Register(g)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go g.Serve(s.Listener(lis))
			defer g.Stop()
			// Envoys hold one connection each; ten here share the load
			// generator's connections.
			const conns = 10
			got := make(chan int, streams)
			for c := range conns {
				cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				defer cc.Close()
				for i := c; i < streams; i += conns {
					st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
					if err != nil {
						b.Fatal(err)
					}
					node := &core.Node{Id: fmt.Sprintf("envoy-%d", i), UserAgentName: "envoy"}
					req := &discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.RouteType, ResourceNames: []string{"chat"}}
					if err := st.Send(req); err != nil {
						b.Fatal(err)
					}
					go func() {
						for {
							resp, err := st.Recv()
							if err != nil {
								return
							}
							ack := &discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: req.ResourceNames,
								VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
							if st.Send(ack) != nil {
								return
							}
							size := 0
							for _, r := range resp.GetResources() {
								size += len(r.GetValue())
							}
							got <- size
						}
					}()
				}
			}
			var size int
			wait := func() {
				for range streams {
					select {
					case size = <-got:
					case <-time.After(30 * time.Second):
						b.Fatal("a stream was not sent the routes")
					}
				}
			}
			wait()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				i++
				if err := s.Update(ctx, models[i%2]); err != nil {
					b.Fatal(err)
				}
				wait()
			}
			b.ReportMetric(float64(size), "route-bytes")
		})
	}
}
