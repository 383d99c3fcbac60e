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
	"google.golang.org/protobuf/proto"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/translate"
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

// A load push serves every kind what a full translation would: the
// routes of the pool whose load moved rebuilt, the other pool's kept.
func TestLoadPushServesWhatTranslateGives(t *testing.T) {
	both := func(chat, code uint64) fleet.Fleet {
		f := testFleet(2, 2, 1, 1)
		for i := range f.Pools {
			p := &f.Pools[i]
			p.Hash.BalanceFactor, p.Hash.BalanceOn, p.Hash.LoadInterval = 200, fleet.BalanceOnPromptBytes, fleet.DefaultLoadInterval
			p.LoadAt = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
			p.Endpoints[1].InFlightBytes = []uint64{chat, code}[i]
		}
		return f
	}
	s := New(Options{})
	ctx := context.Background()
	for _, f := range []fleet.Fleet{both(1000, 2000), both(1000, 5000), both(7000, 5000)} {
		if err := update(ctx, s, f); err != nil {
			t.Fatal(err)
		}
		m, err := fleet.Prepare(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range translate.Kinds {
			want, err := translate.Translate(m, kind)
			if err != nil {
				t.Fatal(err)
			}
			got := s.Resources(kind)
			if len(got.Routes) != len(want.Routes) {
				t.Fatalf("%v: %d route configurations, want %d", kind, len(got.Routes), len(want.Routes))
			}
			for i := range want.Routes {
				if !proto.Equal(got.Routes[i], want.Routes[i]) {
					t.Errorf("%v: route configuration %s differs from a full translation's", kind, want.Routes[i].GetName())
				}
			}
		}
	}
}
