package bench

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	accesslogcfgv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/kvxds/kvxds/test/adsenvoy"
	"github.com/kvxds/kvxds/test/workload"
	"github.com/kvxds/kvxds/xds/bootstrap"
	"github.com/kvxds/kvxds/xds/translate"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// alsRecorder is an AccessLogService keeping every message by node.
type alsRecorder struct {
	alsv3.UnimplementedAccessLogServiceServer
	mu   sync.Mutex
	msgs []*alsv3.StreamAccessLogsMessage
	// nodes is the node of each stream, from its first message.
	nodes []string
}

func (s *alsRecorder) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	for first := true; ; first = false {
		m, err := stream.Recv()
		if err != nil {
			return nil
		}
		s.mu.Lock()
		if first {
			s.nodes = append(s.nodes, m.GetIdentifier().GetNode().GetId())
		}
		s.msgs = append(s.msgs, m)
		s.mu.Unlock()
	}
}

func (s *alsRecorder) entries() (out []*alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries, nodes []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs {
		out = append(out, m.GetHttpLogs())
	}
	return out, slices.Clone(s.nodes)
}

// anyNode keys every node to one snapshot.
type anyNode struct{}

func (anyNode) ID(*corev3.Node) string { return "all" }

// withAccessLog returns a copy of l whose HTTP connection manager also
// logs to cfg.
func withAccessLog(t *testing.T, l *listenerv3.Listener, cfg *grpcalsv3.HttpGrpcAccessLogConfig) *listenerv3.Listener {
	t.Helper()
	l = proto.Clone(l).(*listenerv3.Listener)
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			m, err := f.GetTypedConfig().UnmarshalNew()
			if err != nil {
				continue
			}
			hcm, ok := m.(*hcmv3.HttpConnectionManager)
			if !ok {
				continue
			}
			tc, err := anypb.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			hcm.AccessLog = append(hcm.AccessLog, &accesslogcfgv3.AccessLog{Name: adsenvoy.HTTPGrpcAccessLogName,
				ConfigType: &accesslogcfgv3.AccessLog_TypedConfig{TypedConfig: tc}})
			a, err := anypb.New(hcm)
			if err != nil {
				t.Fatal(err)
			}
			f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
			return l
		}
	}
	t.Fatal("the listener has no HTTP connection manager")
	return nil
}

// TestEnvoyAccessLog: a simulated Envoy whose listener has a gRPC access
// log sends every request it routed, on a stream of its own that names
// its node, with the headers it routed with (the Lua filter's included)
// and the replica it chose; without the access log it sends nothing.
func TestEnvoyAccessLog(t *testing.T) {
	requireLuaJIT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reps, addrs := startTestFleet(t, 2)
	// Hot keys off: the served listener has no access log of its own
	// and its Lua filter sets no spread sub-key; the test adds its own.
	pol, err := Policy(PolicyOptions{Mode: KVXDS, Endpoints: addrs, TimeScale: 10, Scrape: time.Second, BodyKey: PrefixKey(64).HCL,
		NoHotKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	k, err := startKVXDS(ctx, Config{}.Defaults(), pol, "envoy-log", KVXDS)
	if err != nil {
		t.Fatal(err)
	}
	defer k.stop()
	// What kvxds serves an Envoy, first without an access log.
	probe, err := startEnvoy(ctx, k.ctrl.XDSAddr(), "envoy-log-probe")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := probe.ads.Resources()
	probe.mu.Lock()
	if len(probe.logging) != 0 || len(probe.loggers) != 0 {
		t.Errorf("%d loggers without an access log in the listener", len(probe.loggers))
	}
	probe.mu.Unlock()
	probe.close()

	// The same resources with a gRPC access log in the pool's listener,
	// served by an ADS server that also serves the access log service,
	// as kvxds does on its xDS address.
	cfg := &grpcalsv3.HttpGrpcAccessLogConfig{
		CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{LogName: translate.HotKeyLogName(PoolName),
			TransportApiVersion: corev3.ApiVersion_V3, BufferFlushInterval: durationpb.New(50 * time.Millisecond),
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: bootstrap.XDSClusterName}}}},
		AdditionalRequestHeadersToLog: []string{bodykey.Header(0), SessionHeader, "x-kvxds-spread"},
	}
	// A logger naming a cluster the Envoy does not have rejects the
	// listener, as Envoy does.
	other := proto.Clone(cfg).(*grpcalsv3.HttpGrpcAccessLogConfig)
	other.CommonConfig.GrpcService.GetEnvoyGrpc().ClusterName = "elsewhere"
	bad := served
	bad.Listeners = nil
	for _, l := range served.Listeners {
		if l.GetName() == PoolName {
			l = withAccessLog(t, l, other)
		}
		bad.Listeners = append(bad.Listeners, l)
	}
	if _, err := buildEnvoyState(bad, nil); err == nil || !strings.Contains(err.Error(), "elsewhere") {
		t.Errorf("a logger of cluster elsewhere: error %v", err)
	}

	res := map[resourcev3.Type][]types.Resource{}
	for _, l := range served.Listeners {
		if l.GetName() == PoolName {
			l = withAccessLog(t, l, cfg)
		}
		res[resourcev3.ListenerType] = append(res[resourcev3.ListenerType], l)
	}
	for _, r := range served.Routes {
		res[resourcev3.RouteType] = append(res[resourcev3.RouteType], r)
	}
	for _, c := range served.Clusters {
		res[resourcev3.ClusterType] = append(res[resourcev3.ClusterType], c)
	}
	for _, a := range served.Assignments {
		res[resourcev3.EndpointType] = append(res[resourcev3.EndpointType], a)
	}
	snap, err := cachev3.NewSnapshot("1", res)
	if err != nil {
		t.Fatal(err)
	}
	cache := cachev3.NewSnapshotCache(true, anyNode{}, nil)
	if err := cache.SetSnapshot(ctx, "all", snap); err != nil {
		t.Fatal(err)
	}
	rec := &alsRecorder{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, cache, nil))
	alsv3.RegisterAccessLogServiceServer(gs, rec)
	go gs.Serve(lis)
	defer gs.Stop()

	var envoys []*envoyClient
	for i := range 2 {
		e, err := startEnvoy(ctx, lis.Addr().String(), "envoy-log-"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		defer e.close()
		envoys = append(envoys, e)
	}

	// Two prompts of their own prefix each, three requests apiece: the
	// log names the replica each prefix went to.
	sentTo := map[string]string{} // prefix key header → replica address
	byID := map[string]string{reps[0].ID(): reps[0].Addr(), reps[1].ID(): reps[1].Addr()}
	for i := range 6 {
		r := &Request{Request: workload.Request{Seq: i, Prompt: strings.Repeat(string(rune('a'+i%2))+"word ", 20) + "tail", MaxTokens: 2}}
		res := envoys[i/3].send(ctx, r, time.Now(), false)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		key, _ := bodykey.PromptPrefix(KeyBody(r), 64)
		sentTo[key] = byID[res.Replica]
	}
	deadline := time.Now().Add(5 * time.Second)
	var logs []*alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries
	var nodes []string
	for n := 0; n < 6; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 6 requests logged", n)
		}
		time.Sleep(20 * time.Millisecond)
		logs, nodes = rec.entries()
		n = 0
		for _, m := range logs {
			n += len(m.GetLogEntry())
		}
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, []string{"envoy-log-a", "envoy-log-b"}) {
		t.Errorf("streams of nodes %v, want one per Envoy", nodes)
	}
	for _, m := range logs {
		for _, e := range m.GetLogEntry() {
			h := e.GetRequest().GetRequestHeaders()
			key := h[bodykey.Header(0)]
			if sentTo[key] == "" || len(h) != 1 {
				t.Errorf("logged headers %v, want the Lua filter's key of a prompt sent, alone (no session, no spread)", h)
			}
			c := e.GetCommonProperties()
			sa := c.GetUpstreamRemoteAddress().GetSocketAddress()
			if got := net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10)); got != sentTo[key] || c.GetUpstreamCluster() == "" {
				t.Errorf("logged upstream %s of cluster %q, want %s", got, c.GetUpstreamCluster(), sentTo[key])
			}
			if e.GetResponse().GetResponseCode().GetValue() != 200 || c.GetTimeToLastDownstreamTxByte().AsDuration() <= 0 {
				t.Errorf("logged response %v after %v", e.GetResponse().GetResponseCode(), c.GetTimeToLastDownstreamTxByte())
			}
		}
	}
	if st := envoys[0].accessLogStats(); st.Written != 3 || st.Dropped != 0 {
		t.Errorf("envoy 0's logger: %+v", st)
	}
}
