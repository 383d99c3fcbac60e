package adsenvoy

import (
	"net"
	"sync"
	"testing"
	"time"

	accesslogcfgv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// alsServer is an AccessLogService that records every stream's messages;
// with endAfter > 0 it ends each stream after that many messages.
type alsServer struct {
	alsv3.UnimplementedAccessLogServiceServer
	endAfter int

	mu      sync.Mutex
	streams [][]*alsv3.StreamAccessLogsMessage
	got     chan struct{} // a message arrived
}

func (s *alsServer) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	s.mu.Lock()
	i := len(s.streams)
	s.streams = append(s.streams, nil)
	s.mu.Unlock()
	for n := 0; ; n++ {
		if s.endAfter > 0 && n == s.endAfter {
			return status.Error(codes.Unavailable, "ending the stream")
		}
		m, err := stream.Recv()
		if err != nil {
			return nil
		}
		s.mu.Lock()
		s.streams[i] = append(s.streams[i], m)
		s.mu.Unlock()
		select {
		case s.got <- struct{}{}:
		default:
		}
	}
}

func (s *alsServer) snapshot() [][]*alsv3.StreamAccessLogsMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]*alsv3.StreamAccessLogsMessage, len(s.streams))
	for i := range s.streams {
		out[i] = append(out[i], s.streams[i]...)
	}
	return out
}

// entries counts the entries received on every stream.
func (s *alsServer) entries() int {
	n := 0
	for _, st := range s.snapshot() {
		for _, m := range st {
			n += len(m.GetHttpLogs().GetLogEntry())
		}
	}
	return n
}

func startALS(t *testing.T, s *alsServer) string {
	t.Helper()
	s.got = make(chan struct{}, 1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	alsv3.RegisterAccessLogServiceServer(gs, s)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func logConfig(name string, flush time.Duration, bufBytes uint32, headers ...string) *grpcalsv3.HttpGrpcAccessLogConfig {
	c := &grpcalsv3.HttpGrpcAccessLogConfig{
		CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{
			LogName:             name,
			TransportApiVersion: corev3.ApiVersion_V3,
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "kvxds"}}},
		},
		AdditionalRequestHeadersToLog: headers,
	}
	if flush > 0 {
		c.CommonConfig.BufferFlushInterval = durationpb.New(flush)
	}
	if bufBytes > 0 {
		c.CommonConfig.BufferSizeBytes = wrapperspb.UInt32(bufBytes)
	}
	return c
}

func TestHTTPGrpcAccessLogs(t *testing.T) {
	grpcLog, err := anypb.New(logConfig("kvxds/bench", 0, 0, "x-kvxds-key-1"))
	if err != nil {
		t.Fatal(err)
	}
	fileLog, err := anypb.New(&filev3.FileAccessLog{Path: "/dev/stdout"})
	if err != nil {
		t.Fatal(err)
	}
	hcm := &hcmv3.HttpConnectionManager{AccessLog: []*accesslogcfgv3.AccessLog{
		{Name: "envoy.access_loggers.file", ConfigType: &accesslogcfgv3.AccessLog_TypedConfig{TypedConfig: fileLog}},
		{Name: "any name", ConfigType: &accesslogcfgv3.AccessLog_TypedConfig{TypedConfig: grpcLog}},
	}}
	got, err := HTTPGrpcAccessLogs(hcm)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].GetCommonConfig().GetLogName() != "kvxds/bench" {
		t.Fatalf("loggers = %v, want the one gRPC logger", got)
	}
	if got, _ := HTTPGrpcAccessLogs(&hcmv3.HttpConnectionManager{}); len(got) != 0 {
		t.Errorf("no access log: %d loggers", len(got))
	}
	bad := &anypb.Any{TypeUrl: grpcLog.TypeUrl, Value: []byte{0xff}}
	hcm.AccessLog = append(hcm.AccessLog, &accesslogcfgv3.AccessLog{ConfigType: &accesslogcfgv3.AccessLog_TypedConfig{TypedConfig: bad}})
	if _, err := HTTPGrpcAccessLogs(hcm); err == nil {
		t.Error("a logger that does not decode: no error")
	}
}

// routerHCM is an HTTP connection manager whose router filter has the
// upstream log rt, after a Lua filter, and whose own access log is hcmLog.
func routerHCM(t *testing.T, rt *routerv3.Router, hcmLog *grpcalsv3.HttpGrpcAccessLogConfig) *hcmv3.HttpConnectionManager {
	t.Helper()
	lua, err := anypb.New(&luav3.Lua{})
	if err != nil {
		t.Fatal(err)
	}
	router, err := anypb.New(rt)
	if err != nil {
		t.Fatal(err)
	}
	hl, err := anypb.New(hcmLog)
	if err != nil {
		t.Fatal(err)
	}
	return &hcmv3.HttpConnectionManager{
		AccessLog: []*accesslogcfgv3.AccessLog{{Name: HTTPGrpcAccessLogName, ConfigType: &accesslogcfgv3.AccessLog_TypedConfig{TypedConfig: hl}}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: "kvxds.body_keys", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: lua}},
			// Envoy finds the router by its config's type, whatever its name.
			{Name: "terminal", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}},
		}}
}

// The router's gRPC upstream loggers are found by the router's config
// type, apart from the connection manager's own, with the flush option.
func TestRouterUpstreamAccessLogs(t *testing.T) {
	upstream, err := anypb.New(logConfig("kvxds-load/bench", 100*time.Millisecond, 0, "content-length", "x-request-id"))
	if err != nil {
		t.Fatal(err)
	}
	fileLog, err := anypb.New(&filev3.FileAccessLog{Path: "/dev/stdout"})
	if err != nil {
		t.Fatal(err)
	}
	rt := &routerv3.Router{UpstreamLog: []*accesslogcfgv3.AccessLog{
		{Name: "envoy.access_loggers.file", ConfigType: &accesslogcfgv3.AccessLog_TypedConfig{TypedConfig: fileLog}},
		{Name: "load", ConfigType: &accesslogcfgv3.AccessLog_TypedConfig{TypedConfig: upstream}},
	}, UpstreamLogOptions: &routerv3.Router_UpstreamAccessLogOptions{FlushUpstreamLogOnUpstreamStream: true}}
	hcm := routerHCM(t, rt, logConfig("kvxds/bench", 0, 0))
	got, flush, err := RouterUpstreamLogs(hcm)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].GetCommonConfig().GetLogName() != "kvxds-load/bench" || !flush {
		t.Fatalf("upstream loggers = %v, flush %v; want the router's one gRPC logger, flushing on the upstream stream", got, flush)
	}
	if hl, err := HTTPGrpcAccessLogs(hcm); err != nil || len(hl) != 1 || hl[0].GetCommonConfig().GetLogName() != "kvxds/bench" {
		t.Errorf("connection manager's loggers = %v, %v; want its own alone", hl, err)
	}

	rt.UpstreamLogOptions = nil
	if got, flush, err := RouterUpstreamLogs(routerHCM(t, rt, logConfig("kvxds/bench", 0, 0))); err != nil || len(got) != 1 || flush {
		t.Errorf("without upstream_log_options: %d loggers, flush %v, %v", len(got), flush, err)
	}
	if got, flush, err := RouterUpstreamLogs(routerHCM(t, &routerv3.Router{}, logConfig("kvxds/bench", 0, 0))); err != nil || len(got) != 0 || flush {
		t.Errorf("a router without an upstream log: %d loggers, flush %v, %v", len(got), flush, err)
	}
	if got, _, err := RouterUpstreamLogs(&hcmv3.HttpConnectionManager{}); err != nil || len(got) != 0 {
		t.Errorf("no router: %d loggers, %v", len(got), err)
	}
	bad := &anypb.Any{TypeUrl: upstream.TypeUrl, Value: []byte{0xff}}
	rt.UpstreamLog = append(rt.UpstreamLog, &accesslogcfgv3.AccessLog{ConfigType: &accesslogcfgv3.AccessLog_TypedConfig{TypedConfig: bad}})
	if _, _, err := RouterUpstreamLogs(routerHCM(t, rt, logConfig("kvxds/bench", 0, 0))); err == nil {
		t.Error("an upstream logger that does not decode: no error")
	}
}

// An upstream log entry carries its type, whether it is intermediate, the
// attempt count and the configured headers; an entry without a type (the
// connection manager's) carries none of them.
func TestAccessLogUpstreamEntry(t *testing.T) {
	srv := &alsServer{}
	addr := startALS(t, srv)
	l, err := NewAccessLogger(addr, &corev3.Node{Id: "envoy-1"}, logConfig("kvxds-load/bench", time.Hour, 0, "content-length", "x-request-id"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	r := Logged{Method: "POST", Path: "/v1/completions", Upstream: "127.0.0.1:8001", Cluster: "bench", Start: start, Attempt: 1,
		Headers: [][2]string{{"x-request-id", "5e8a0b52-1c1f-4f3e-9d1a-3b1c0f6a7e21"}, {"content-length", "120"}, {"x-kvxds-key-1", "00ff"}}}
	ready := r
	ready.Type = accesslogdatav3.AccessLogType_UpstreamPoolReady
	end := r
	end.Type, end.Code, end.FirstUpstreamByte = accesslogdatav3.AccessLogType_UpstreamEnd, 200, 30*time.Millisecond
	for _, c := range []struct {
		r            Logged
		intermediate bool
	}{{ready, true}, {end, false}} {
		e := l.Entry(c.r)
		cp := e.GetCommonProperties()
		if cp.GetAccessLogType() != c.r.Type || cp.GetIntermediateLogEntry() != c.intermediate || cp.GetUpstreamRequestAttemptCount() != 1 {
			t.Errorf("%v entry: type %v, intermediate %v, attempt %d; want intermediate %v, attempt 1", c.r.Type,
				cp.GetAccessLogType(), cp.GetIntermediateLogEntry(), cp.GetUpstreamRequestAttemptCount(), c.intermediate)
		}
		h := e.GetRequest().GetRequestHeaders()
		if len(h) != 2 || h["x-request-id"] != "5e8a0b52-1c1f-4f3e-9d1a-3b1c0f6a7e21" || h["content-length"] != "120" {
			t.Errorf("%v entry: headers %v, want x-request-id and content-length", c.r.Type, h)
		}
		if sa := cp.GetUpstreamRemoteAddress().GetSocketAddress(); sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != 8001 ||
			cp.GetUpstreamCluster() != "bench" || !cp.GetStartTime().AsTime().Equal(start) {
			t.Errorf("%v entry: upstream %v of %q from %v", c.r.Type, sa, cp.GetUpstreamCluster(), cp.GetStartTime())
		}
	}
	if e := l.Entry(end); e.GetResponse().GetResponseCode().GetValue() != 200 ||
		e.GetCommonProperties().GetTimeToFirstUpstreamRxByte().AsDuration() != 30*time.Millisecond {
		t.Errorf("end entry: response %v after %v", e.GetResponse(), e.GetCommonProperties().GetTimeToFirstUpstreamRxByte())
	}
	// The connection manager's entry as before: no type, not intermediate,
	// no attempt count.
	hcmEntry := r
	hcmEntry.Attempt = 0
	if cp := l.Entry(hcmEntry).GetCommonProperties(); cp.GetAccessLogType() != accesslogdatav3.AccessLogType_NotSet ||
		cp.GetIntermediateLogEntry() || cp.GetUpstreamRequestAttemptCount() != 0 {
		t.Errorf("untyped entry: %v", cp)
	}
	// Both reach the server in order.
	l.Log(ready)
	l.Log(end)
	l.Flush()
	waitFor(t, "the two entries", func() bool { return srv.entries() == 2 })
	got := srv.snapshot()[0][0].GetHttpLogs().GetLogEntry()
	if got[0].GetCommonProperties().GetAccessLogType() != accesslogdatav3.AccessLogType_UpstreamPoolReady ||
		got[1].GetCommonProperties().GetAccessLogType() != accesslogdatav3.AccessLogType_UpstreamEnd {
		t.Errorf("received %v then %v", got[0].GetCommonProperties().GetAccessLogType(), got[1].GetCommonProperties().GetAccessLogType())
	}
}

// Entries flush every buffer_flush_interval as one message; the stream's
// first message alone names the node and the log; only the configured
// headers the request carries are logged.
func TestAccessLoggerFlushInterval(t *testing.T) {
	srv := &alsServer{}
	addr := startALS(t, srv)
	node := &corev3.Node{Id: "envoy-1", Cluster: "bench"}
	created := time.Now() // the flush timer starts with the logger
	l, err := NewAccessLogger(addr, node, logConfig("kvxds/bench", 100*time.Millisecond, 0,
		"x-kvxds-key-1", "X-Kvxds-Spread", "x-absent"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	req := Logged{Method: "POST", Path: "/v1/chat/completions", Upstream: "127.0.0.1:8001", Cluster: "bench",
		Start: start, FirstUpstreamByte: 30 * time.Millisecond, LastDownstreamByte: 900 * time.Millisecond, Code: 200,
		Headers: [][2]string{{"x-kvxds-key-1", "00ff00ff00ff00ff"}, {"x-kvxds-spread", "01100111"}, {"x-other", "no"}}}
	l.Log(req)
	l.Log(req)
	time.Sleep(20 * time.Millisecond)
	// A loaded machine may oversleep past the first tick.
	if n := srv.entries(); n != 0 && time.Since(created) < 80*time.Millisecond {
		t.Fatalf("%d entries before the flush interval", n)
	}
	waitFor(t, "the first flush", func() bool { return srv.entries() == 2 })
	l.Log(req)
	waitFor(t, "the second flush", func() bool { return srv.entries() == 3 })

	streams := srv.snapshot()
	if len(streams) != 1 || len(streams[0]) != 2 {
		t.Fatalf("streams %d, messages %d; want one stream with two messages", len(streams), len(streams[0]))
	}
	first, second := streams[0][0], streams[0][1]
	if id := first.GetIdentifier(); id.GetLogName() != "kvxds/bench" || !proto.Equal(id.GetNode(), node) {
		t.Errorf("first message's identifier = %v", id)
	}
	if second.GetIdentifier() != nil {
		t.Errorf("second message carries an identifier: %v", second.GetIdentifier())
	}
	e := first.GetHttpLogs().GetLogEntry()[0]
	wantHeaders := map[string]string{"x-kvxds-key-1": "00ff00ff00ff00ff", "x-kvxds-spread": "01100111"}
	if got := e.GetRequest().GetRequestHeaders(); len(got) != len(wantHeaders) || got["x-kvxds-key-1"] != wantHeaders["x-kvxds-key-1"] ||
		got["x-kvxds-spread"] != wantHeaders["x-kvxds-spread"] {
		t.Errorf("request headers = %v, want %v", got, wantHeaders)
	}
	c := e.GetCommonProperties()
	sa := c.GetUpstreamRemoteAddress().GetSocketAddress()
	if sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != 8001 || c.GetUpstreamCluster() != "bench" {
		t.Errorf("upstream = %v in %q", sa, c.GetUpstreamCluster())
	}
	if !c.GetStartTime().AsTime().Equal(start) || c.GetTimeToFirstUpstreamRxByte().AsDuration() != 30*time.Millisecond ||
		c.GetTimeToLastDownstreamTxByte().AsDuration() != 900*time.Millisecond {
		t.Errorf("timings = %v, %v, %v", c.GetStartTime().AsTime(), c.GetTimeToFirstUpstreamRxByte().AsDuration(),
			c.GetTimeToLastDownstreamTxByte().AsDuration())
	}
	if e.GetResponse().GetResponseCode().GetValue() != 200 || e.GetRequest().GetRequestMethod() != corev3.RequestMethod_POST ||
		e.GetRequest().GetPath() != "/v1/chat/completions" {
		t.Errorf("response %v, method %v, path %q", e.GetResponse().GetResponseCode(), e.GetRequest().GetRequestMethod(), e.GetRequest().GetPath())
	}
	if st := l.Stats(); st.Written != 3 || st.Dropped != 0 || st.Messages != 2 || st.Streams != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// A buffer that reaches buffer_size_bytes flushes at once, long before
// the interval.
func TestAccessLoggerBufferSize(t *testing.T) {
	srv := &alsServer{}
	addr := startALS(t, srv)
	req := Logged{Upstream: "127.0.0.1:8001", Cluster: "bench", Headers: [][2]string{{"x-session-id", "s-1"}}}
	probe, err := NewAccessLogger(addr, &corev3.Node{Id: "probe"}, logConfig("l", time.Hour, 0, "x-session-id"))
	if err != nil {
		t.Fatal(err)
	}
	size := proto.Size(probe.Entry(req))
	probe.Close()
	// Three entries reach the buffer size: the third flushes all three.
	l, err := NewAccessLogger(addr, &corev3.Node{Id: "envoy-1"}, logConfig("l", time.Hour, uint32(3*size), "x-session-id"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Log(req)
	l.Log(req)
	time.Sleep(50 * time.Millisecond)
	if n := srv.entries(); n != 0 {
		t.Fatalf("%d entries sent below the buffer size", n)
	}
	l.Log(req)
	waitFor(t, "the size-triggered flush", func() bool { return srv.entries() == 3 })
	for i := 0; i < 6; i++ {
		l.Log(req)
	}
	waitFor(t, "two more flushes", func() bool { return srv.entries() == 9 })
	if st := l.Stats(); st.Messages != 3 {
		t.Errorf("%d messages, want 3 of three entries", st.Messages)
	}
}

// A stream the server ends is replaced at the next flush, whose first
// message names the node again.
func TestAccessLoggerReconnects(t *testing.T) {
	srv := &alsServer{endAfter: 1}
	addr := startALS(t, srv)
	l, err := NewAccessLogger(addr, &corev3.Node{Id: "envoy-1"}, logConfig("kvxds/bench", 20*time.Millisecond, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Entries sent on a stream the server has just ended are lost; keep
	// logging until three streams carried some.
	waitFor(t, "three streams", func() bool {
		l.Log(Logged{Upstream: "127.0.0.1:8001"})
		time.Sleep(5 * time.Millisecond)
		n := 0
		for _, st := range srv.snapshot() {
			if len(st) > 0 {
				n++
			}
		}
		return n >= 3
	})
	for i, st := range srv.snapshot() {
		if len(st) == 0 {
			continue
		}
		if st[0].GetIdentifier().GetNode().GetId() != "envoy-1" {
			t.Errorf("stream %d: first message without the identifier", i)
		}
	}
	if st := l.Stats(); st.Streams < 3 {
		t.Errorf("%d streams for three ended ones", st.Streams)
	}
}

// With no server, the buffer fills and later entries are dropped.
func TestAccessLoggerDropsWhileDisconnected(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there
	req := Logged{Upstream: "127.0.0.1:8001"}
	l, err := NewAccessLogger(addr, &corev3.Node{Id: "envoy-1"}, logConfig("l", 10*time.Millisecond, 200))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	waitFor(t, "entries dropped", func() bool {
		l.Log(req)
		time.Sleep(time.Millisecond)
		return l.Stats().Dropped > 0
	})
	if st := l.Stats(); st.Written == 0 || st.Messages != 0 {
		t.Errorf("stats = %+v: want entries written until the buffer filled, none sent", st)
	}
}
