package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/xds/envoylb"
	"github.com/kvxds/kvxds/xds/translate"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

const hotKeysPolicy = `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-tenant" }
  }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"] }
}
`

// An Envoy streams access logs to kvxds as it runs: a tenant that
// carries half the pool's requests becomes a hot key of the served model
// and shows (hashed) on the status document and /metrics, with the
// requests sent away from their key's first replica; a gRPC client's
// stream and a stream without a node are refused, and a malformed entry
// is counted.
func TestHotKeysFromAccessLogs(t *testing.T) {
	c, err := New(Options{
		PolicySource: []byte(hotKeysPolicy), PolicyName: "hot.hcl",
		XDSAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0",
		Logger: hclog.New(&hclog.LoggerOptions{Name: "hot", Level: hclog.Warn, Output: testWriter{t}}),
		ID:     "hot",
	})
	if err != nil {
		t.Fatal(err)
	}
	// The policy's hot_keys block decodes into these settings.
	c.initial.Pools[0].Hash.Hot = &fleet.HotKeys{Max: 8, Interval: 100 * time.Millisecond, HalfLife: time.Minute, LogCluster: "kvxds"}
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, "ready", func() bool { return c.Server().Ready() })
	versions := c.Server().Versions(translate.Envoy)

	first := envoyFirst(t, c.Server().Resources(translate.Envoy), "chat")
	cc, err := grpc.NewClient(c.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	als := alsv3.NewAccessLogServiceClient(cc)
	stream := func(node *core.Node, entries []*datav3.HTTPAccessLogEntry) error {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		st, err := als.StreamAccessLogs(sctx)
		if err != nil {
			t.Fatal(err)
		}
		id := &alsv3.StreamAccessLogsMessage_Identifier{Node: node, LogName: "kvxds/chat"}
		// As Envoy does: batches, the identifier in the first only.
		for len(entries) > 0 {
			n := min(len(entries), 100)
			msg := &alsv3.StreamAccessLogsMessage{Identifier: id, LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{
				HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: entries[:n]},
			}}
			if err := st.Send(msg); err != nil {
				break
			}
			entries, id = entries[n:], nil
		}
		_, err = st.CloseAndRecv()
		return err
	}
	envoy := &core.Node{Id: "envoy-1", Cluster: "edge", UserAgentName: "envoy"}
	entry := func(tenant, upstream string) *datav3.HTTPAccessLogEntry {
		host, port, _ := strings.Cut(upstream, ":")
		var p uint32
		fmt.Sscan(port, &p)
		return &datav3.HTTPAccessLogEntry{
			CommonProperties: &datav3.AccessLogCommon{UpstreamCluster: "chat", UpstreamRemoteAddress: &core.Address{
				Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: host, PortSpecifier: &core.SocketAddress_PortValue{PortValue: p}}},
			}},
			Request: &datav3.HTTPRequestProperties{RequestHeaders: map[string]string{"x-tenant": tenant}},
		}
	}
	const hot = "acme"
	var entries []*datav3.HTTPAccessLogEntry
	for i := range 600 {
		tenant := fmt.Sprint("tenant-", i)
		if i%2 == 0 {
			tenant = hot
		}
		entries = append(entries, entry(tenant, first(tenant)))
	}
	// A malformed entry: no request.
	entries = append(entries, &datav3.HTTPAccessLogEntry{CommonProperties: &datav3.AccessLogCommon{UpstreamCluster: "chat"}})
	if err := stream(envoy, entries); err != nil {
		t.Fatalf("access log stream: %v", err)
	}
	waitUntil(t, "the hot tenant in the served model", func() bool { return len(c.Fleet().Pools[0].HotKeys) == 1 })
	hk := c.Fleet().Pools[0].HotKeys[0]
	if hk.Key != 0 || hk.Value != hot || hk.Spread != 32 || hk.Share < 0.45 || hk.Share > 0.55 {
		t.Errorf("table entry %+v, want acme at 0.5 over 32 (16 buckets for each of the 2 replicas it fills)", hk)
	}
	// The table changes the pool's routes only.
	for typ, v := range c.Server().Versions(translate.Envoy) {
		if !strings.HasSuffix(typ, "RouteConfiguration") && versions[typ] != v {
			t.Errorf("%s moved with the hot-key table: %s → %s", typ, versions[typ], v)
		}
	}

	// Spread: the hot tenant on another replica than its first.
	other := "10.0.0.1:8000"
	if first(hot) == other {
		other = "10.0.0.2:8000"
	}
	if err := stream(envoy, []*datav3.HTTPAccessLogEntry{entry(hot, other), entry(hot, other), entry("cold", other), entry("cold", first("cold"))}); err != nil {
		t.Fatal(err)
	}
	away := 1.0
	if first("cold") == other {
		away = 0
	}

	// Refused: a proxyless gRPC client and a stream without a node.
	err = stream(&core.Node{Id: "client", UserAgentName: "gRPC Go"}, []*datav3.HTTPAccessLogEntry{entry(hot, other)})
	if grpcstatus.Code(err) != codes.PermissionDenied {
		t.Errorf("a gRPC client's stream ended with %v, want PermissionDenied", err)
	}
	if err := stream(nil, []*datav3.HTTPAccessLogEntry{entry(hot, other)}); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Errorf("a stream without a node ended with %v, want Unauthenticated", err)
	}

	// The status document, over HTTP.
	hs := statusOf(t, c.AdminAddr()).Pools[0].HotKeys
	shown := bodykey.Hash([]byte(hot))[:8]
	if hs == nil || len(hs.Keys) != 1 || hs.Keys[0].Value != shown || hs.Keys[0].KeyName != "header x-tenant" || hs.Keys[0].Spread != 32 {
		t.Fatalf("status hot keys: %+v", hs)
	}
	if hs.Requests != 604 || hs.Away[status.AwaySpread] != 2 || float64(hs.Away[status.AwayBound]) != away {
		t.Errorf("status: %d requests, away %v; want 604, 2 spread, %v bound", hs.Requests, hs.Away, away)
	}

	// /metrics, as Prometheus reads it.
	mfs := scrape(t, "http://"+c.AdminAddr()+"/metrics")
	wantMetrics(t, mfs, []metricWant{
		{"kvxds_hot_keys", map[string]string{"pool": "chat"}, 1},
		{"kvxds_hot_key_spread", map[string]string{"pool": "chat", "key_index": "0", "key": shown}, 32},
		{"kvxds_requests_away_total", map[string]string{"pool": "chat", "reason": "spread"}, 2},
		{"kvxds_requests_away_total", map[string]string{"pool": "chat", "reason": "bound"}, away},
		{"kvxds_requests_away_total", map[string]string{"pool": "chat", "reason": "escape"}, 0},
		{"kvxds_access_log_entries_total", map[string]string{"result": "observed"}, 604},
		{"kvxds_access_log_entries_total", map[string]string{"result": "malformed_no_request"}, 1},
		{"kvxds_access_log_streams_refused_total", map[string]string{"reason": "not_envoy"}, 1},
		{"kvxds_access_log_streams_refused_total", map[string]string{"reason": "no_node"}, 1},
	})
	if got, ok := sample(mfs, "kvxds_hot_key_share", map[string]string{"pool": "chat", "key_index": "0", "key": shown}); !ok || got < 0.45 || got > 0.55 {
		t.Errorf("kvxds_hot_key_share = %v (found %v), want about 0.5", got, ok)
	}
	if body := get(t, "http://"+c.AdminAddr()+"/metrics"); strings.Contains(body, `key="`+hot+`"`) {
		t.Errorf("/metrics shows a header key's raw value")
	}
}

// envoyFirst returns the replica Envoy's table for a cluster, as served,
// gives a header value.
func envoyFirst(t *testing.T, res *translate.Resources, cluster string) func(string) string {
	t.Helper()
	for _, cl := range res.Clusters {
		if cl.GetName() != cluster {
			continue
		}
		for _, cla := range res.Endpoints {
			if cla.GetClusterName() != cl.GetName() && cla.GetClusterName() != cl.GetEdsClusterConfig().GetServiceName() {
				continue
			}
			b, err := envoylb.NewBalancer(cl, cla)
			if err != nil {
				t.Fatal(err)
			}
			return func(v string) string {
				h, _ := envoylb.HeaderHash([]string{v})
				return b.Hosts[b.Owner(h)].Address
			}
		}
	}
	t.Fatalf("no cluster %s served", cluster)
	return nil
}
