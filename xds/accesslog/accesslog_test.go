package accesslog

import (
	"context"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakeSink serves pool "chat" (clusters "chat" and "chat-g0") with a
// chain of a header key and a body key, and "tcp" with a cookie key.
type fakeSink struct {
	mu   sync.Mutex
	reqs []Request
}

func (f *fakeSink) KeyHeaders(name string) (string, []string, bool) {
	switch name {
	case "chat", "chat-g0":
		return "chat", []string{"X-Session", "x-kvxds-key-2"}, true
	case "cookies":
		return "cookies", []string{""}, true
	}
	return "", nil, false
}

func (f *fakeSink) Observe(r Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, r)
}

func serve(t *testing.T, sink Sink, reg prometheus.Registerer) alsv3.AccessLogServiceClient {
	t.Helper()
	return serveWith(t, Options{Sink: sink, Registerer: reg})
}

// serveWith serves the service of opts on a loopback port and returns a
// client of it.
func serveWith(t *testing.T, opts Options) alsv3.AccessLogServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	New(opts).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return alsv3.NewAccessLogServiceClient(cc)
}

var start = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func entry(cluster, upstream string, port uint32, headers map[string]string) *datav3.HTTPAccessLogEntry {
	c := &datav3.AccessLogCommon{
		UpstreamCluster: cluster,
		StartTime:       timestamppb.New(start),
		Duration:        durationpb.New(250 * time.Millisecond),
	}
	if upstream != "" {
		c.UpstreamRemoteAddress = &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
			Address: upstream, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
		}}}
	}
	return &datav3.HTTPAccessLogEntry{CommonProperties: c, Request: &datav3.HTTPRequestProperties{RequestHeaders: headers}}
}

func envoyNode(id string) *core.Node {
	return &core.Node{Id: id, UserAgentName: "envoy"}
}

func send(t *testing.T, c alsv3.AccessLogServiceClient, msgs ...*alsv3.StreamAccessLogsMessage) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			break // the server ended the stream: CloseAndRecv says why
		}
	}
	_, err = st.CloseAndRecv()
	return err
}

func httpLogs(id *alsv3.StreamAccessLogsMessage_Identifier, es ...*datav3.HTTPAccessLogEntry) *alsv3.StreamAccessLogsMessage {
	return &alsv3.StreamAccessLogsMessage{Identifier: id, LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{
		HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: es},
	}}
}

func TestEntries(t *testing.T) {
	sink := &fakeSink{}
	reg := prometheus.NewRegistry()
	c := serve(t, sink, reg)
	id := &alsv3.StreamAccessLogsMessage_Identifier{Node: envoyNode("envoy-1"), LogName: "kvxds/chat"}
	err := send(t, c,
		httpLogs(id,
			// The first key of the chain wins, in Envoy's lowercase.
			entry("chat", "10.0.0.1", 8000, map[string]string{"x-session": "s1", "x-kvxds-key-2": "0123456789abcdef", "x-kvxds-spread": "01100101"}),
			// The second when the first is absent.
			entry("chat", "::1", 8001, map[string]string{"x-kvxds-key-2": "0123456789abcdef", "x-kvxds-went": "01234567+"}),
			// No key.
			entry("chat", "10.0.0.1", 8000, map[string]string{"x-other": "x"}),
			// A value that is no key.
			entry("chat", "10.0.0.1", 8000, map[string]string{"x-session": strings.Repeat("v", 300)}),
			// No request properties.
			&datav3.HTTPAccessLogEntry{CommonProperties: &datav3.AccessLogCommon{UpstreamCluster: "chat"}},
		),
		// Later messages carry no identifier: the stream's log name holds.
		httpLogs(nil, entry("chat-g0", "", 0, map[string]string{"X-Session": "s2"})),
		&alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_TcpLogs{
			TcpLogs: &alsv3.StreamAccessLogsMessage_TCPAccessLogEntries{LogEntry: []*datav3.TCPAccessLogEntry{{}}},
		}},
	)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	// A logger not named for a pool: the upstream cluster names it.
	other := &alsv3.StreamAccessLogsMessage_Identifier{Node: envoyNode("envoy-2"), LogName: "mesh"}
	if err := send(t, c, httpLogs(other,
		entry("chat-g0", "10.0.0.2", 8000, map[string]string{"x-session": "s3"}),
		entry("elsewhere", "10.0.0.2", 8000, map[string]string{"x-session": "s3"}),
		entry("", "10.0.0.2", 8000, map[string]string{"x-session": "s3"}),
		entry("cookies", "10.0.0.2", 8000, map[string]string{"cookie": "a=b"}),
	)); err != nil {
		t.Fatalf("stream: %v", err)
	}
	want := []Request{
		{Pool: "chat", Key: 0, Value: "s1", Spread: "01100101", Cluster: "chat", Upstream: "10.0.0.1:8000", Start: start, Duration: 250 * time.Millisecond},
		{Pool: "chat", Key: 1, Value: "0123456789abcdef", Cluster: "chat", Upstream: "[::1]:8001", Start: start, Duration: 250 * time.Millisecond, Followed: true},
		{Pool: "chat", Key: 0, Value: "s2", Cluster: "chat-g0", Start: start, Duration: 250 * time.Millisecond},
		{Pool: "chat", Key: 0, Value: "s3", Cluster: "chat-g0", Upstream: "10.0.0.2:8000", Start: start, Duration: 250 * time.Millisecond},
	}
	for i := range sink.reqs {
		sink.reqs[i].Start = sink.reqs[i].Start.UTC()
	}
	if !reflect.DeepEqual(sink.reqs, want) {
		t.Errorf("observed:\n%+v\nwant:\n%+v", sink.reqs, want)
	}
	for result, n := range map[string]float64{
		ResultObserved: 4, ResultNoKey: 2, ResultBadValue: 1, ResultNoRequest: 1,
		ResultTCP: 1, ResultUnknownPool: 1, ResultNoPool: 1,
	} {
		got := testutil.ToFloat64(mustVec(t, reg, "kvxds_access_log_entries_total", "result", result))
		if got != n {
			t.Errorf("kvxds_access_log_entries_total{result=%q} = %v, want %v", result, got, n)
		}
	}
}

func TestRefused(t *testing.T) {
	sink := &fakeSink{}
	reg := prometheus.NewRegistry()
	c := serve(t, sink, reg)
	grpcNode := &core.Node{Id: "client-1", UserAgentName: "gRPC Go"}
	grpcJS := &core.Node{Id: "client-2", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"kvxds.client": structpb.NewStringValue("grpc-js")}}}
	for _, tc := range []struct {
		name   string
		id     *alsv3.StreamAccessLogsMessage_Identifier
		code   codes.Code
		reason string
	}{
		{"no identifier", nil, codes.Unauthenticated, RefusedNoNode},
		{"no node id", &alsv3.StreamAccessLogsMessage_Identifier{Node: &core.Node{}, LogName: "kvxds/chat"}, codes.Unauthenticated, RefusedNoNode},
		{"grpc-go", &alsv3.StreamAccessLogsMessage_Identifier{Node: grpcNode, LogName: "kvxds/chat"}, codes.PermissionDenied, RefusedNotEnvoy},
		{"grpc-js", &alsv3.StreamAccessLogsMessage_Identifier{Node: grpcJS, LogName: "kvxds/chat"}, codes.PermissionDenied, RefusedNotEnvoy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(mustVec(t, reg, "kvxds_access_log_streams_refused_total", "reason", tc.reason))
			err := send(t, c, httpLogs(tc.id, entry("chat", "10.0.0.1", 8000, map[string]string{"x-session": "s"})))
			if status.Code(err) != tc.code {
				t.Errorf("stream ended with %v, want %v", err, tc.code)
			}
			after := testutil.ToFloat64(mustVec(t, reg, "kvxds_access_log_streams_refused_total", "reason", tc.reason))
			if after != before+1 {
				t.Errorf("refusals %q went from %v to %v", tc.reason, before, after)
			}
		})
	}
	if len(sink.reqs) != 0 {
		t.Errorf("refused streams were observed: %+v", sink.reqs)
	}
}

// mustVec returns the collector of one series of a registered vector.
func mustVec(t *testing.T, reg *prometheus.Registry, name, label, value string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x"}, func() float64 { return m.GetCounter().GetValue() })
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return nil
}

// adapterSink is fakeSink whose pool "chat" places adapters.
type adapterSink struct{ fakeSink }

func (a *adapterSink) AdapterHeader(pool string) string {
	if pool == "chat" {
		return "x-kvxds-adapter"
	}
	return ""
}

// A pool placing adapters hands every request to the sink, with its
// adapter and rejection, keyed or not; a bad adapter name is malformed.
func TestAdapterEntries(t *testing.T) {
	sink := &adapterSink{}
	reg := prometheus.NewRegistry()
	c := serve(t, sink, reg)
	id := &alsv3.StreamAccessLogsMessage_Identifier{Node: envoyNode("envoy-1"), LogName: "kvxds/chat"}
	err := send(t, c, httpLogs(id,
		entry("chat/adapter/sql", "10.0.0.1", 8000, map[string]string{"x-session": "s1", "x-kvxds-adapter": "sql"}),
		entry("chat", "10.0.0.2", 8000, map[string]string{"x-kvxds-adapter": "fr"}),
		entry("chat", "10.0.0.2", 8000, map[string]string{"x-kvxds-adapter-rejected": "not_string"}),
		entry("chat", "10.0.0.2", 8000, map[string]string{}),
		entry("chat", "10.0.0.2", 8000, map[string]string{"x-kvxds-adapter": "bad name"}),
	))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		key                int
		adapter, rejection string
	}
	var gs []got
	for _, r := range sink.reqs {
		gs = append(gs, got{r.Key, r.Adapter, r.AdapterRejected})
	}
	want := []got{{0, "sql", ""}, {-1, "fr", ""}, {-1, "", "not_string"}, {-1, "", ""}}
	if !reflect.DeepEqual(gs, want) {
		t.Errorf("requests %+v, want %+v", gs, want)
	}
	if n := testutil.ToFloat64(mustVec(t, reg, "kvxds_access_log_entries_total", "result", ResultBadValue)); n != 1 {
		t.Errorf("malformed values = %v, want the bad adapter name", n)
	}
}

// prefillSink is fakeSink whose pool "chat" is a decode pool.
type prefillSink struct{ fakeSink }

func (p *prefillSink) PrefillHeader(pool string) string {
	if pool == "chat" {
		return "x-prefiller-host-port"
	}
	return ""
}

func (p *prefillSink) PrefillKeys(pool string) (string, []string) {
	if pool == "chat" {
		return "chat-prefill", []string{"x-kvxds-prefill-key-1", "", "x-session"}
	}
	return "", nil
}

// A decode pool hands every request to the sink with the prefill replica
// named for it, keyed or not; a value that is no host:port is malformed.
func TestPrefillEntries(t *testing.T) {
	sink := &prefillSink{}
	reg := prometheus.NewRegistry()
	c := serve(t, sink, reg)
	id := &alsv3.StreamAccessLogsMessage_Identifier{Node: envoyNode("envoy-1"), LogName: "kvxds/chat"}
	err := send(t, c, httpLogs(id,
		entry("chat", "10.0.0.1", 8000, map[string]string{"x-prefiller-host-port": "10.0.1.1:8000"}),
		entry("chat", "10.0.0.2", 8000, map[string]string{"x-session": "s1", "x-prefiller-host-port": "[fd00::1]:8000"}),
		entry("chat", "10.0.0.2", 8000, map[string]string{}),
		entry("chat", "10.0.0.2", 8000, map[string]string{"x-prefiller-host-port": "prefill-0.llm:8000"}),
		entry("chat", "10.0.0.3", 8000, map[string]string{"x-kvxds-prefill-key-1": "0123456789abcdef", "x-session": "s2", "x-prefiller-host-port": "10.0.1.2:8000"}),
	))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		pool              string
		key               int
		value             string
		upstream, prefill string
		prefillKey        int
		prefillValue      string
	}
	var gs []got
	for _, r := range sink.reqs {
		gs = append(gs, got{r.Pool, r.Key, r.Value, r.Upstream, r.Prefill, r.PrefillKey, r.PrefillValue})
	}
	// Each request of the decode pool with a prefill key is also one of
	// the prefill pool (first, with its first key present), upstream
	// unknown; the decode pool's request carries that key too.
	want := []got{
		{"chat", -1, "", "10.0.0.1:8000", "10.0.1.1:8000", 0, ""},
		{"chat-prefill", 2, "s1", "", "", 0, ""}, {"chat", 0, "s1", "10.0.0.2:8000", "[fd00::1]:8000", 2, "s1"},
		{"chat", -1, "", "10.0.0.2:8000", "", 0, ""},
		{"chat-prefill", 0, "0123456789abcdef", "", "", 0, ""}, {"chat", 0, "s2", "10.0.0.3:8000", "10.0.1.2:8000", 0, "0123456789abcdef"},
	}
	if !reflect.DeepEqual(gs, want) {
		t.Errorf("requests %+v, want %+v", gs, want)
	}
	if n := testutil.ToFloat64(mustVec(t, reg, "kvxds_access_log_entries_total", "result", ResultBadValue)); n != 1 {
		t.Errorf("malformed values = %v, want the prefill host that is no address", n)
	}
}
