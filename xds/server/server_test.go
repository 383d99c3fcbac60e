package server

import (
	"context"
	"maps"
	"net"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/translate"
)

func testFleet(weights ...uint32) fleet.Fleet {
	pool := func(name string, port uint32) fleet.Pool {
		p := fleet.Pool{
			Name: name, Settings: fleet.Settings{
				Port: port,
				Hash: fleet.Hash{Algorithm: fleet.Maglev, BalanceFactor: 150, Keys: []fleet.HashKey{{Header: "x-session-id"}}},
			},
		}
		for i, w := range weights {
			p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: "127.0.0.1", Port: 8001 + uint32(i), Weight: w})
		}
		return p
	}
	return fleet.Fleet{Pools: []fleet.Pool{pool("chat", 10000), pool("code", 10001)}}
}

type harness struct {
	srv  *Server
	reg  *prometheus.Registry
	cc   *grpc.ClientConn
	addr string
}

func start(t *testing.T, f fleet.Fleet) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	s := New(Options{Registerer: reg})
	if err := update(context.Background(), s, f); err != nil {
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
	t.Cleanup(func() { cc.Close() })
	return &harness{srv: s, reg: reg, cc: cc, addr: lis.Addr().String()}
}

func grpcNode() *core.Node { return &core.Node{Id: "any-id-at-all", UserAgentName: "gRPC Go"} }

// receive reads a stream on one goroutine; next waits for its next
// message, or reports false after d.
func receive[T any](t *testing.T, recvFn func() (T, error)) <-chan T {
	ch := make(chan T, 16)
	go func() {
		defer close(ch)
		for {
			v, err := recvFn()
			if err != nil {
				return
			}
			ch <- v
		}
	}()
	return ch
}

func next[T any](ch <-chan T, d time.Duration) (T, bool) {
	select {
	case v, ok := <-ch:
		return v, ok
	case <-time.After(d):
		var zero T
		return zero, false
	}
}

func TestClassify(t *testing.T) {
	meta := func(v string) *structpb.Struct {
		s, _ := structpb.NewStruct(map[string]any{"kvxds.client": v})
		return s
	}
	for _, tc := range []struct {
		name string
		node *core.Node
		want translate.Kind
	}{
		{"envoy", &core.Node{Id: "e", UserAgentName: "envoy"}, translate.Envoy},
		{"nothing", &core.Node{}, translate.Envoy},
		{"nil", nil, translate.Envoy},
		{"grpc-go", &core.Node{UserAgentName: "gRPC Go"}, translate.GRPC},
		{"grpc-java", &core.Node{UserAgentName: "gRPC Java"}, translate.GRPC},
		{"grpc-js", &core.Node{UserAgentName: "gRPC Node Pure JS"}, translate.GRPCJS},
		{"grpc-js with kvxds bootstrap", &core.Node{UserAgentName: "gRPC Node Pure JS", Metadata: meta("grpc")}, translate.GRPCJS},
		{"override to grpc-js", &core.Node{UserAgentName: "gRPC Go", Metadata: meta("grpc-js")}, translate.GRPCJS},
		{"override to grpc", &core.Node{UserAgentName: "envoy", Metadata: meta("grpc")}, translate.GRPC},
		{"override to envoy", &core.Node{UserAgentName: "gRPC Go", Metadata: meta("Envoy")}, translate.Envoy},
		{"bad override ignored", &core.Node{UserAgentName: "gRPC Go", Metadata: meta("nginx")}, translate.GRPC},
		// Debian's python3-grpcio, as it introduces itself.
		{"C-core 1.51.1 Python", &core.Node{UserAgentName: "gRPC C-core linux Python", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "C-core 29.0.0 Python 1.51.1"}}, translate.GRPCNoHash},
		{"C-core 1.51 with kvxds bootstrap", &core.Node{UserAgentName: "gRPC C-core linux Python", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "C-core 29.0.0 Python 1.51.0"}, Metadata: meta("grpc")}, translate.GRPCNoHash},
		{"C-core 1.51 C++", &core.Node{UserAgentName: "gRPC C-core linux", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "C-core 29.0.0"}}, translate.GRPCNoHash},
		{"C-core 1.51.3 Ruby", &core.Node{UserAgentName: "gRPC C-core linux Ruby", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "C-core 29.0.0 Ruby 1.51.3"}}, translate.GRPC},
		{"C-core 1.52 Python", &core.Node{UserAgentName: "gRPC C-core linux Python", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "C-core 30.0.0 Python 1.52.0"}}, translate.GRPC},
		{"C-core 1.51 as Envoy", &core.Node{UserAgentName: "gRPC C-core linux Python", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "C-core 29.0.0 Python 1.51.1"}, Metadata: meta("envoy")}, translate.Envoy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.node); got != tc.want {
				t.Errorf("Classify = %v, want %v", got, tc.want)
			}
		})
	}
}

// Weight, health and membership changes bump EDS, and for gRPC clients
// the CDS of the pools whose ring size follows the healthy weight; never
// LDS or RDS, and never Envoy's CDS.
// pickFleet is testFleet(2, 2, 1, 1) bounding prompt bytes with its load
// observed: the first replica has health h, the second inFlight bytes in
// flight.
func pickFleet(inFlight uint64, h fleet.Health) fleet.Fleet {
	f := testFleet(2, 2, 1, 1)
	p := &f.Pools[0]
	p.Hash.BalanceFactor = 200
	p.Hash.BalanceOn = fleet.BalanceOnPromptBytes
	p.Hash.LoadInterval = fleet.DefaultLoadInterval
	p.LoadAt = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p.Endpoints[0].Health = h
	p.Endpoints[1].InFlightBytes = inFlight
	return f
}

// pickLoRAFleet is pickFleet(120_000, fleet.Healthy) placing adapter
// "sql" on one replica, its first-ranked, which drains, taken out by the
// escape hatch if saturated (then it keeps its place in the adapter).
func pickLoRAFleet(saturated bool) fleet.Fleet {
	f := pickFleet(120_000, fleet.Healthy)
	p := &f.Pools[0]
	p.LoRA = &fleet.Adapters{MaxLoRA: 4}
	p.Adapters = []fleet.Adapter{{Name: "sql", Replicas: 1, Share: 0.5}}
	m, err := fleet.Prepare(f)
	if err != nil {
		panic(err)
	}
	prepared := m.Fleet().Pools[0]
	id := prepared.Endpoints[fleet.AdapterRanking(&prepared, "sql")[0]].Identity()
	for i := range p.Endpoints {
		if e := &p.Endpoints[i]; e.Identity() == id || e.Address() == id {
			e.Health, e.Saturated = fleet.Draining, saturated
		}
	}
	return f
}

// The adapters' entries of a pick table follow their members: a
// saturated member keeps its place (and is not served), a draining one
// is replaced by the next-ranked replica, which changes Envoy's routes,
// though the pool's own table stays as it was.
func TestAdapterTablesBumpRoutes(t *testing.T) {
	s := New(Options{})
	ctx := context.Background()
	if err := update(ctx, s, pickLoRAFleet(true)); err != nil {
		t.Fatal(err)
	}
	before := s.Versions(translate.Envoy)
	if err := update(ctx, s, pickLoRAFleet(false)); err != nil {
		t.Fatal(err)
	}
	after := s.Versions(translate.Envoy)
	if after[resourcev3.RouteType] == before[resourcev3.RouteType] || after[resourcev3.ListenerType] != before[resourcev3.ListenerType] {
		t.Errorf("envoy: routes %s → %s, listeners %s → %s; want new routes only", before[resourcev3.RouteType], after[resourcev3.RouteType], before[resourcev3.ListenerType], after[resourcev3.ListenerType])
	}
}

func TestEndpointChangesBumpOnlyWhatTheyMust(t *testing.T) {
	s := New(Options{})
	ctx := context.Background()
	if err := update(ctx, s, testFleet(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	eds := map[string]bool{resourcev3.EndpointType: true}
	edsAndRing := map[string]bool{resourcev3.EndpointType: true, resourcev3.ClusterType: true}
	for _, tc := range []struct {
		name  string
		fleet fleet.Fleet
		// type URL → must change, for Envoy and for gRPC clients
		envoy, grpc map[string]bool
	}{
		{"weights", testFleet(1, 3, 1), eds, edsAndRing},
		{"same total weight", testFleet(2, 2, 1), eds, eds},
		{"membership", testFleet(2, 2, 1, 1), eds, edsAndRing},
		{"same", testFleet(2, 2, 1, 1), nil, nil},
		{"health", func() fleet.Fleet {
			f := testFleet(2, 2, 1, 1)
			f.Pools[0].Endpoints[0].Health = fleet.Draining
			return f
		}(), eds, edsAndRing},
		{"balance factor", func() fleet.Fleet {
			f := testFleet(2, 2, 1, 1)
			f.Pools[0].Endpoints[0].Health = fleet.Draining
			f.Pools[0].Hash.BalanceFactor = 200
			return f
		}(), map[string]bool{resourcev3.ClusterType: true}, nil}, // gRPC ignores it
		// A pool whose Envoys pick replicas from its slot table, in the
		// routes: the table follows the replicas' health and their
		// bytes in flight, which only Envoy's routes carry.
		{"bound on prompt bytes", pickFleet(0, fleet.Draining), map[string]bool{resourcev3.ListenerType: true, resourcev3.RouteType: true}, nil},
		{"bytes in flight", pickFleet(120_000, fleet.Draining), map[string]bool{resourcev3.RouteType: true}, nil},
		{"pick pool health", pickFleet(120_000, fleet.Healthy), map[string]bool{resourcev3.RouteType: true, resourcev3.EndpointType: true}, edsAndRing},
		{"hit rates", func() fleet.Fleet {
			f := pickFleet(120_000, fleet.Healthy)
			f.Pools[0].Endpoints[1].Cached = 9
			return f
		}(), map[string]bool{resourcev3.RouteType: true}, nil},
		{"load counted again", func() fleet.Fleet {
			f := pickFleet(120_000, fleet.Healthy)
			f.Pools[0].Endpoints[1].Cached = 9
			f.Pools[0].LoadAt = f.Pools[0].LoadAt.Add(time.Second)
			return f
		}(), map[string]bool{resourcev3.RouteType: true}, nil},
		{"load and weights", func() fleet.Fleet {
			f := pickFleet(60_000, fleet.Healthy)
			f.Pools[0].Endpoints[1].Cached = 9
			f.Pools[0].Endpoints[1].Weight = 3
			return f
		}(), map[string]bool{resourcev3.RouteType: true, resourcev3.EndpointType: true}, edsAndRing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := map[translate.Kind]map[string]string{}
			for _, kind := range translate.Kinds {
				before[kind] = s.Versions(kind)
			}
			if err := update(ctx, s, tc.fleet); err != nil {
				t.Fatal(err)
			}
			for _, kind := range translate.Kinds {
				want := tc.grpc
				switch kind {
				case translate.Envoy:
					want = tc.envoy
				case translate.GRPCNoHash:
					// No ring to size: its clusters never follow the
					// endpoints.
					want = maps.Clone(tc.grpc)
					delete(want, resourcev3.ClusterType)
				}
				for typ, v := range s.Versions(kind) {
					if changed := v != before[kind][typ]; changed != want[typ] {
						t.Errorf("%s %s: changed=%v, want %v", kind, shortType(typ), changed, want[typ])
					}
				}
			}
		})
	}
}

func TestInvalidFleetKeepsLastGood(t *testing.T) {
	s := New(Options{})
	ctx := context.Background()
	if err := update(ctx, s, testFleet(1, 1)); err != nil {
		t.Fatal(err)
	}
	before := s.Versions(translate.Envoy)
	bad := testFleet(1, 1)
	bad.Pools[1].Port = bad.Pools[0].Port
	if err := update(ctx, s, bad); err == nil {
		t.Fatal("a fleet with two pools on one port was accepted")
	}
	if after := s.Versions(translate.Envoy); len(after) != len(before) || after[resourcev3.ListenerType] != before[resourcev3.ListenerType] {
		t.Fatalf("versions changed after a rejected update: %v → %v", before, after)
	}
}

// A proxyless gRPC client subscribes to one pool's listener; it must get
// it even though the snapshot holds more.
func TestSinglePoolSubscription(t *testing.T) {
	h := start(t, testFleet(1, 1))
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(h.cc).StreamAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, stream.Recv)
	if err := stream.Send(&discovery.DiscoveryRequest{Node: grpcNode(), TypeUrl: resourcev3.ListenerType, ResourceNames: []string{"code"}}); err != nil {
		t.Fatal(err)
	}
	resp, ok := next(msgs, 5*time.Second)
	if !ok {
		t.Fatal("no listener sent for a single-pool subscription")
	}
	if len(resp.GetResources()) != 1 {
		t.Fatalf("got %d listeners, want 1", len(resp.GetResources()))
	}
	var l listenerv3.Listener
	if err := resp.GetResources()[0].UnmarshalTo(&l); err != nil {
		t.Fatal(err)
	}
	if l.GetName() != "code" || l.GetApiListener() == nil {
		t.Fatalf("got listener %q (api listener %v), want the gRPC listener \"code\"", l.GetName(), l.GetApiListener() != nil)
	}
}

// A client that rejects a version must not receive it again until the
// configuration changes.
func TestNACKIsNotResentInALoop(t *testing.T) {
	h := start(t, testFleet(1, 1))
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(h.cc).StreamAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, stream.Recv)
	req := &discovery.DiscoveryRequest{Node: grpcNode(), TypeUrl: resourcev3.ClusterType}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	first, ok := next(msgs, 5*time.Second)
	if !ok {
		t.Fatal("no clusters sent")
	}
	nack := &discovery.DiscoveryRequest{
		TypeUrl: resourcev3.ClusterType, ResponseNonce: first.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "test rejects everything"},
	}
	if err := stream.Send(nack); err != nil {
		t.Fatal(err)
	}
	if resp, ok := next(msgs, time.Second); ok {
		t.Fatalf("rejected version %s re-sent as %s", first.GetVersionInfo(), resp.GetVersionInfo())
	}
	if got := testutil.ToFloat64(h.srv.metrics.nacks.WithLabelValues("grpc", "cds")); got != 1 {
		t.Errorf("kvxds_xds_nacks_total = %v, want 1", got)
	}
	// A new configuration is sent.
	f := testFleet(1, 1)
	f.Pools[0].Hash.Keyless = fleet.LeastRequest
	if err := update(context.Background(), h.srv, f); err != nil {
		t.Fatal(err)
	}
	next, ok := next(msgs, 5*time.Second)
	if !ok {
		t.Fatal("new version not sent after a NACK")
	}
	if next.GetVersionInfo() == first.GetVersionInfo() {
		t.Fatalf("re-sent the rejected version %s", next.GetVersionInfo())
	}
}

func TestDeltaNACKIsNotResent(t *testing.T) {
	h := start(t, testFleet(1, 1))
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(h.cc).DeltaAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, stream.Recv)
	if err := stream.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "envoy-delta", UserAgentName: "envoy"}, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	first, ok := next(msgs, 5*time.Second)
	if !ok {
		t.Fatal("no delta response")
	}
	if len(first.GetResources()) != 4 { // two pools, each with its keyless cluster
		t.Fatalf("got %d clusters, want 4", len(first.GetResources()))
	}
	if err := stream.Send(&discovery.DeltaDiscoveryRequest{
		TypeUrl: resourcev3.ClusterType, ResponseNonce: first.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "rejected"},
	}); err != nil {
		t.Fatal(err)
	}
	if resp, ok := next(msgs, time.Second); ok {
		t.Fatalf("rejected resources re-sent: %v", resp.GetResources())
	}
	if got := testutil.ToFloat64(h.srv.metrics.nacks.WithLabelValues("envoy", "cds")); got != 1 {
		t.Errorf("kvxds_xds_nacks_total = %v, want 1", got)
	}
}

// Adopters that only take endpoints from kvxds use the plain EDS service.
func TestStandaloneEDS(t *testing.T) {
	h := start(t, testFleet(2, 5))
	stream, err := endpointservice.NewEndpointDiscoveryServiceClient(h.cc).StreamEndpoints(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, stream.Recv)
	if err := stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "mesh-sidecar"}, ResourceNames: []string{"chat"}}); err != nil {
		t.Fatal(err)
	}
	resp, ok := next(msgs, 5*time.Second)
	if !ok {
		t.Fatal("no endpoints sent")
	}
	if len(resp.GetResources()) != 1 {
		t.Fatalf("got %d assignments, want 1", len(resp.GetResources()))
	}
	var cla endpointv3.ClusterLoadAssignment
	if err := resp.GetResources()[0].UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	var weights []uint32
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			weights = append(weights, e.GetLoadBalancingWeight().GetValue())
		}
	}
	if cla.GetClusterName() != "chat" || len(weights) != 2 || weights[0]+weights[1] != 7 {
		t.Fatalf("got %s with weights %v, want chat with weights 2 and 5", cla.GetClusterName(), weights)
	}
}

// update prepares f and hands it to s, as kvxds's reconcile step does.
func update(ctx context.Context, s *Server, f fleet.Fleet) error {
	m, err := fleet.Prepare(f)
	if err != nil {
		return err
	}
	return s.Update(ctx, m)
}
