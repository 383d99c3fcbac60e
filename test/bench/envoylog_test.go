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
	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
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

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/adsenvoy"
	"github.com/kvxds/kvxds/test/sim"
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
	// logNames is the log name of each message's stream.
	logNames []string
	// nodes is the node of each stream, from its first message.
	nodes []string
}

func (s *alsRecorder) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	var name string
	for first := true; ; first = false {
		m, err := stream.Recv()
		if err != nil {
			return nil
		}
		s.mu.Lock()
		if first {
			s.nodes = append(s.nodes, m.GetIdentifier().GetNode().GetId())
			name = m.GetIdentifier().GetLogName()
		}
		s.msgs = append(s.msgs, m)
		s.logNames = append(s.logNames, name)
		s.mu.Unlock()
	}
}

// logged is the entries received on the streams of log name, in order.
func (s *alsRecorder) logged(name string) []*accesslogdatav3.HTTPAccessLogEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*accesslogdatav3.HTTPAccessLogEntry
	for i, m := range s.msgs {
		if s.logNames[i] == name {
			out = append(out, m.GetHttpLogs().GetLogEntry()...)
		}
	}
	return out
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
	return editHCM(t, l, func(hcm *hcmv3.HttpConnectionManager) {
		hcm.AccessLog = append(hcm.AccessLog, grpcAccessLog(t, cfg))
	})
}

// grpcAccessLog is an access log of Envoy's gRPC HTTP logger with cfg.
func grpcAccessLog(t *testing.T, cfg *grpcalsv3.HttpGrpcAccessLogConfig) *accesslogcfgv3.AccessLog {
	t.Helper()
	tc, err := anypb.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &accesslogcfgv3.AccessLog{Name: adsenvoy.HTTPGrpcAccessLogName, ConfigType: &accesslogcfgv3.AccessLog_TypedConfig{TypedConfig: tc}}
}

// withUpstreamLog returns a copy of l whose router filter also has the
// upstream log cfg, flushing on the upstream stream if flush, as kvxds
// will serve some pools' listeners.
func withUpstreamLog(t *testing.T, l *listenerv3.Listener, cfg *grpcalsv3.HttpGrpcAccessLogConfig, flush bool) *listenerv3.Listener {
	t.Helper()
	return editHCM(t, l, func(hcm *hcmv3.HttpConnectionManager) {
		for _, f := range hcm.GetHttpFilters() {
			var rt routerv3.Router
			if f.GetTypedConfig().MessageIs(&rt) {
				if err := f.GetTypedConfig().UnmarshalTo(&rt); err != nil {
					t.Fatal(err)
				}
				rt.UpstreamLog = append(rt.UpstreamLog, grpcAccessLog(t, cfg))
				if flush {
					rt.UpstreamLogOptions = &routerv3.Router_UpstreamAccessLogOptions{FlushUpstreamLogOnUpstreamStream: true}
				}
				a, err := anypb.New(&rt)
				if err != nil {
					t.Fatal(err)
				}
				f.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}
				return
			}
		}
		t.Fatal("the HTTP connection manager has no router")
	})
}

// editHCM returns a copy of l whose HTTP connection manager edit changed.
func editHCM(t *testing.T, l *listenerv3.Listener, edit func(*hcmv3.HttpConnectionManager)) *listenerv3.Listener {
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
			edit(hcm)
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

// serveWith serves the resources served over ADS, the pool's listener as
// edit returns it, with an access log service recording what it receives
// on the same address, as kvxds serves both on its xDS address; it
// answers that address. The server stops when the test ends.
func serveWith(ctx context.Context, t *testing.T, served adsenvoy.Resources, edit func(*listenerv3.Listener) *listenerv3.Listener) (string, *alsRecorder) {
	t.Helper()
	res := map[resourcev3.Type][]types.Resource{}
	for _, l := range served.Listeners {
		if l.GetName() == PoolName {
			l = edit(l)
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
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), rec
}

// servedWithoutLogs starts two replicas and kvxds over them, with hot keys
// off (the served listener has no access log of its own and its Lua
// filter sets no spread sub-key; the tests add their own), and an Envoy
// named name+"-probe" attached to it, to learn what kvxds serves. The
// caller stops kvxds and closes the probe.
func servedWithoutLogs(ctx context.Context, t *testing.T, name string) ([]*sim.Replica, *kvxdsRun, *envoyClient) {
	t.Helper()
	reps, addrs := startTestFleet(t, 2)
	// Envoy's own bound: no pick filter, whose load log the tests would
	// see besides their own.
	pol, err := Policy(PolicyOptions{Mode: KVXDS, Endpoints: addrs, TimeScale: 10, Scrape: time.Second, BodyKey: PrefixKey(64).HCL,
		NoHotKeys: true, BalanceOn: fleet.BalanceOnRequests})
	if err != nil {
		t.Fatal(err)
	}
	k, err := startKVXDS(ctx, Config{}.Defaults(), pol, name, KVXDS)
	if err != nil {
		t.Fatal(err)
	}
	probe, err := startEnvoy(ctx, k.ctrl.XDSAddr(), name+"-probe")
	if err != nil {
		k.stop()
		t.Fatal(err)
	}
	return reps, k, probe
}

// xdsLogConfig is a gRPC access log to the bootstrap's xDS cluster (where
// kvxds serves the access log service), flushed every flush, logging
// headers.
func xdsLogConfig(name string, flush time.Duration, headers ...string) *grpcalsv3.HttpGrpcAccessLogConfig {
	return &grpcalsv3.HttpGrpcAccessLogConfig{
		CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{LogName: name,
			TransportApiVersion: corev3.ApiVersion_V3, BufferFlushInterval: durationpb.New(flush),
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: bootstrap.XDSClusterName}}}},
		AdditionalRequestHeadersToLog: headers,
	}
}

// TestEnvoyAccessLog: a simulated Envoy whose listener has a gRPC access
// log sends every request it routed, on a stream of its own that names
// its node, with the headers it routed with (the Lua filter's included)
// and the replica it chose; without the access log it sends nothing.
func TestEnvoyAccessLog(t *testing.T) {
	requireLuaJIT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// What kvxds serves an Envoy, first without an access log.
	reps, k, probe := servedWithoutLogs(ctx, t, "envoy-log")
	defer k.stop()
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
	cfg := xdsLogConfig(translate.HotKeyLogName(PoolName), 50*time.Millisecond, bodykey.Header(0), SessionHeader, "x-kvxds-spread")
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

	addr, rec := serveWith(ctx, t, served, func(l *listenerv3.Listener) *listenerv3.Listener { return withAccessLog(t, l, cfg) })

	var envoys []*envoyClient
	for i := range 2 {
		e, err := startEnvoy(ctx, addr, "envoy-log-"+string(rune('a'+i)))
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

// TestEnvoyUpstreamAccessLog: a simulated Envoy whose router has a gRPC
// upstream log writes, for each request it routes, an UpstreamPoolReady
// entry (intermediate) once the host is chosen, when
// flush_upstream_log_on_upstream_stream is set, then an UpstreamEnd entry
// at the request's end, both of the first attempt, with the request's
// x-request-id (the connection manager's, or the client's own), its
// content-length and the chosen replica; the connection manager's log
// sees the same x-request-id. Without the flush option only the end entry
// is written.
func TestEnvoyUpstreamAccessLog(t *testing.T) {
	requireLuaJIT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reps, k, probe := servedWithoutLogs(ctx, t, "envoy-upstream-log")
	defer k.stop()
	served, _ := probe.ads.Resources()
	probe.close()

	upstreamName, hcmName := "kvxds-load/"+PoolName, translate.HotKeyLogName(PoolName)
	upstream := xdsLogConfig(upstreamName, 20*time.Millisecond, "content-length", "x-request-id")
	hcmLog := xdsLogConfig(hcmName, 20*time.Millisecond, "x-request-id")

	// An upstream logger naming a cluster the Envoy does not have rejects
	// the listener, as for the connection manager's.
	other := proto.Clone(upstream).(*grpcalsv3.HttpGrpcAccessLogConfig)
	other.CommonConfig.GrpcService.GetEnvoyGrpc().ClusterName = "elsewhere"
	bad := served
	bad.Listeners = nil
	for _, l := range served.Listeners {
		if l.GetName() == PoolName {
			l = withUpstreamLog(t, l, other, true)
		}
		bad.Listeners = append(bad.Listeners, l)
	}
	if _, err := buildEnvoyState(bad, nil); err == nil || !strings.Contains(err.Error(), "elsewhere") {
		t.Errorf("an upstream logger of cluster elsewhere: error %v", err)
	}

	byID := map[string]string{reps[0].ID(): reps[0].Addr(), reps[1].ID(): reps[1].Addr()}
	upstreamOf := func(e *accesslogdatav3.HTTPAccessLogEntry) string {
		sa := e.GetCommonProperties().GetUpstreamRemoteAddress().GetSocketAddress()
		return net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10))
	}
	for _, flush := range []bool{true, false} {
		t.Run("flush="+strconv.FormatBool(flush), func(t *testing.T) {
			addr, rec := serveWith(ctx, t, served, func(l *listenerv3.Listener) *listenerv3.Listener {
				return withUpstreamLog(t, withAccessLog(t, l, hcmLog), upstream, flush)
			})
			e, err := startEnvoy(ctx, addr, "envoy-upstream-log")
			if err != nil {
				t.Fatal(err)
			}
			defer e.close()
			e.mu.Lock()
			if len(e.loggers) != 2 || len(e.logging) != 1 || len(e.upstreamLogging) != 1 || e.flushUpstreamLog != flush {
				t.Errorf("%d loggers, %d of the connection manager, %d upstream, flush %v", len(e.loggers), len(e.logging),
					len(e.upstreamLogging), e.flushUpstreamLog)
			}
			e.mu.Unlock()

			// Two requests: the second carries the client's own request id.
			reqs := []*Request{
				{Request: workload.Request{Seq: 0, Prompt: strings.Repeat("aword ", 20) + "tail", MaxTokens: 2}},
				{Request: workload.Request{Seq: 1, Prompt: strings.Repeat("bword ", 20) + "tail", MaxTokens: 2}},
			}
			var sentTo []string
			for i, r := range reqs {
				var extra [][2]string
				if i == 1 {
					extra = append(extra, [2]string{"X-Request-Id", "client-chosen-id"})
				}
				res := e.send(ctx, r, time.Now(), false, extra...)
				if res.Err != nil {
					t.Fatal(res.Err)
				}
				sentTo = append(sentTo, byID[res.Replica])
			}
			perRequest := 1
			if flush {
				perRequest = 2
			}
			waitFor := func(name string, n int) []*accesslogdatav3.HTTPAccessLogEntry {
				t.Helper()
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					got := rec.logged(name)
					if len(got) >= n || time.Now().After(deadline) {
						if len(got) != n {
							t.Fatalf("%s: %d entries, want %d", name, len(got), n)
						}
						return got
					}
				}
			}
			ups := waitFor(upstreamName, perRequest*len(reqs))
			hcms := waitFor(hcmName, len(reqs))
			var ids []string
			for i, r := range reqs {
				entries := ups[i*perRequest : (i+1)*perRequest]
				id := entries[0].GetRequest().GetRequestHeaders()["x-request-id"]
				if i == 1 && id != "client-chosen-id" {
					t.Errorf("request %d: x-request-id %q, want the client's", i, id)
				}
				if i == 0 && len(id) != 36 {
					t.Errorf("request %d: x-request-id %q, want a UUID", i, id)
				}
				ids = append(ids, id)
				want := []accesslogdatav3.AccessLogType{accesslogdatav3.AccessLogType_UpstreamEnd}
				if flush {
					want = []accesslogdatav3.AccessLogType{accesslogdatav3.AccessLogType_UpstreamPoolReady, accesslogdatav3.AccessLogType_UpstreamEnd}
				}
				for j, en := range entries {
					c := en.GetCommonProperties()
					h := en.GetRequest().GetRequestHeaders()
					if c.GetAccessLogType() != want[j] || c.GetIntermediateLogEntry() != (want[j] == accesslogdatav3.AccessLogType_UpstreamPoolReady) ||
						c.GetUpstreamRequestAttemptCount() != 1 {
						t.Errorf("request %d entry %d: type %v, intermediate %v, attempt %d; want %v", i, j, c.GetAccessLogType(),
							c.GetIntermediateLogEntry(), c.GetUpstreamRequestAttemptCount(), want[j])
					}
					if h["x-request-id"] != id || h["content-length"] != strconv.Itoa(len(KeyBody(r))) {
						t.Errorf("request %d entry %d: headers %v, want x-request-id %s and content-length %d", i, j, h, id, len(KeyBody(r)))
					}
					if got := upstreamOf(en); got != sentTo[i] || c.GetUpstreamCluster() == "" || c.GetStartTime() == nil {
						t.Errorf("request %d entry %d: upstream %s of cluster %q, want %s", i, j, got, c.GetUpstreamCluster(), sentTo[i])
					}
				}
				end := entries[len(entries)-1]
				if end.GetResponse().GetResponseCode().GetValue() != 200 {
					t.Errorf("request %d: end entry's response %v", i, end.GetResponse())
				}
				// The connection manager's entry: the same request id, no type.
				hc := hcms[i]
				if hc.GetRequest().GetRequestHeaders()["x-request-id"] != id || hc.GetCommonProperties().GetAccessLogType() != accesslogdatav3.AccessLogType_NotSet ||
					hc.GetCommonProperties().GetIntermediateLogEntry() {
					t.Errorf("request %d: the connection manager's entry %v", i, hc)
				}
			}
			if ids[0] == ids[1] {
				t.Errorf("both requests have x-request-id %s", ids[0])
			}
			// A request routed but not sent ends its attempt on release.
			rt, err := e.routeRequest(nil, KeyBody(reqs[0]))
			if err != nil {
				t.Fatal(err)
			}
			rt.respond()
			rt.finish()
			rt.release()
			rt.release() // the end entry is written once
			ups = waitFor(upstreamName, perRequest*(len(reqs)+1))
			if last := ups[len(ups)-1]; last.GetCommonProperties().GetAccessLogType() != accesslogdatav3.AccessLogType_UpstreamEnd ||
				last.GetRequest().GetRequestHeaders()["x-request-id"] == "" || upstreamOf(last) != rt.addr {
				t.Errorf("released request's end entry %v", last)
			}
			if !slices.ContainsFunc(rt.headers, func(h [2]string) bool { return h[0] == "x-request-id" }) ||
				slices.ContainsFunc(rt.headers, func(h [2]string) bool { return h[0] == "content-length" }) {
				t.Errorf("routed headers %v: want x-request-id and no content-length (the upstream request declares its own)", rt.headers)
			}
		})
	}
}

// One logger per distinct config, the connection manager's and the
// router's alike, as Envoy's logger cache keeps them.
func TestEnvoyAccessLoggersShared(t *testing.T) {
	cfg := func(name string) *grpcalsv3.HttpGrpcAccessLogConfig {
		return &grpcalsv3.HttpGrpcAccessLogConfig{CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{LogName: name}}
	}
	// Nothing listens: the loggers connect lazily and log nothing here.
	e := &envoyClient{xdsAddr: "127.0.0.1:1", node: &corev3.Node{Id: "envoy-1"}, loggers: map[string]*adsenvoy.AccessLogger{}}
	defer func() {
		for _, l := range e.loggers {
			l.Close()
		}
	}()
	if err := e.startLoggers([]*grpcalsv3.HttpGrpcAccessLogConfig{cfg("a")}, []*grpcalsv3.HttpGrpcAccessLogConfig{cfg("a"), cfg("b"), cfg("b")}); err != nil {
		t.Fatal(err)
	}
	if len(e.loggers) != 2 || len(e.logging) != 1 || len(e.upstreamLogging) != 2 || e.logging[0] != e.upstreamLogging[0] {
		t.Fatalf("%d loggers, %d of the connection manager, %d upstream; want a shared", len(e.loggers), len(e.logging), len(e.upstreamLogging))
	}
	// The router's logger b goes; a stays.
	if err := e.startLoggers([]*grpcalsv3.HttpGrpcAccessLogConfig{cfg("a")}, nil); err != nil {
		t.Fatal(err)
	}
	if len(e.loggers) != 1 || len(e.upstreamLogging) != 0 || e.logging[0].LogName() != "a" {
		t.Errorf("%d loggers, %d upstream after the router's went", len(e.loggers), len(e.upstreamLogging))
	}
}
