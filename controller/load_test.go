package controller

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvxds/kvxds/fleet"
)

// loadPolicy bounds prompt bytes on every Envoy's load, over two replicas.
func loadPolicy(extra string) string {
	return extra + `
pool "docs" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    balance_factor = 150
    balance_on     = "prompt_bytes"
    load_interval  = "50ms"
    hot_keys { enabled = false }
  }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000"] }
}
`
}

// openLogs opens an Envoy's access log stream to the instance at xds,
// under log name, and sends entries in batches of 100, the identifier in
// the first only, as Envoy does. The stream stays open until close,
// which returns the stream's end.
func openLogs(t *testing.T, xds, node, name string, entries []*datav3.HTTPAccessLogEntry) (close func() error) {
	t.Helper()
	cc, err := grpc.NewClient(xds, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	st, err := alsv3.NewAccessLogServiceClient(cc).StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := &alsv3.StreamAccessLogsMessage_Identifier{Node: &core.Node{Id: node, UserAgentName: "envoy"}, LogName: name}
	for len(entries) > 0 {
		n := min(len(entries), 100)
		if err := st.Send(&alsv3.StreamAccessLogsMessage{Identifier: id, LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{
			HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: entries[:n]},
		}}); err != nil {
			t.Fatal(err)
		}
		entries, id = entries[n:], nil
	}
	return func() error {
		defer cc.Close()
		defer cancel()
		_, err := st.CloseAndRecv()
		return err
	}
}

// envoyLoad opens an Envoy's load log stream to an instance and logs the
// start of one request of n bytes to upstream; the stream stays open (the
// request in flight) until the test ends.
func envoyLoad(t *testing.T, xds, node, request, upstream string, n int) {
	t.Helper()
	e := loadStart(request, upstream, n, nil)
	// Ended with the test (its instance may be gone): the stream's end
	// takes its requests along, which the test must not see before.
	stop := openLogs(t, xds, node, "kvxds-load/docs", []*datav3.HTTPAccessLogEntry{e})
	t.Cleanup(func() { stop() })
}

// loadStart is the start entry of request id's attempt to upstream, of n
// bytes, with the request headers extra.
func loadStart(id, upstream string, n int, extra map[string]string) *datav3.HTTPAccessLogEntry {
	h := map[string]string{"x-request-id": id, "content-length": strconv.Itoa(n)}
	for k, v := range extra {
		h[k] = v
	}
	return &datav3.HTTPAccessLogEntry{
		CommonProperties: &datav3.AccessLogCommon{
			UpstreamCluster:             "docs",
			AccessLogType:               datav3.AccessLogType_UpstreamPoolReady,
			UpstreamRequestAttemptCount: 1,
			UpstreamRemoteAddress: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: upstream, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8000},
			}}},
		},
		Request: &datav3.HTTPRequestProperties{RequestHeaders: h},
	}
}

// A request named computed by a later request of the same Envoy's log
// (x-kvxds-computed, which the pick filter sets once a response's first
// token came) stops counting in the served figures; one named by another
// Envoy's log does not.
func TestLoadCountsUntilComputed(t *testing.T) {
	r := startController(t, "one", loadPolicy(""), "")
	stop := openLogs(t, r.c.XDSAddr(), "envoy-a", "kvxds-load/docs", []*datav3.HTTPAccessLogEntry{
		loadStart("r1", "10.0.0.1", 3000, nil),
		loadStart("r2", "10.0.0.1", 500, nil),
		loadStart("r3", "10.0.0.2", 100, map[string]string{"x-kvxds-computed": "r1"}),
	})
	t.Cleanup(func() { stop() })
	other := openLogs(t, r.c.XDSAddr(), "envoy-b", "kvxds-load/docs", []*datav3.HTTPAccessLogEntry{
		loadStart("r4", "10.0.0.2", 50, map[string]string{"x-kvxds-computed": "r2"}),
	})
	t.Cleanup(func() { other() })
	want := map[string]uint64{"10.0.0.1:8000": 500, "10.0.0.2:8000": 150}
	waitUntil(t, "the served figures to leave r1 out", func() bool { return fmt.Sprint(inFlight(r.c)) == fmt.Sprint(want) })
	wantMetrics(t, scrape(t, "http://"+r.c.AdminAddr()+"/metrics"), []metricWant{
		{"kvxds_load_log_requests_total", map[string]string{"result": "computed"}, 1},
		{"kvxds_load_log_requests_total", map[string]string{"result": "started"}, 4},
	})
}

// inFlight is each replica's bytes in flight in c's served fleet.
func inFlight(c *Controller) map[string]uint64 {
	out := map[string]uint64{}
	for _, p := range c.Fleet().Pools {
		for _, e := range p.Endpoints {
			out[e.Address()] = e.InFlightBytes
		}
	}
	return out
}

// Two instances, one following the other, each with an Envoy attached
// that logs its requests in flight: both serve the sum of both Envoys'
// figures, which a pick filter bounds on. When the follower's Envoy's
// figures change, the leader's tables follow; when the follower goes, its
// figures leave the leader's sum within LoadTTL intervals.
func TestFollowSharesLoad(t *testing.T) {
	leader := startController(t, "leader", loadPolicy(""), "")
	follower := startController(t, "follower", loadPolicy(fmt.Sprintf("ha { follow = %q }\n", "http://"+leader.c.AdminAddr())), "")
	envoyLoad(t, leader.c.XDSAddr(), "envoy-a", "r1", "10.0.0.1", 3000)
	envoyLoad(t, follower.c.XDSAddr(), "envoy-b", "r2", "10.0.0.1", 500)
	envoyLoad(t, follower.c.XDSAddr(), "envoy-c", "r3", "10.0.0.2", 700)

	want := map[string]uint64{"10.0.0.1:8000": 3500, "10.0.0.2:8000": 700}
	sums := func(c *Controller) func() bool {
		return func() bool { return fmt.Sprint(inFlight(c)) == fmt.Sprint(want) }
	}
	waitUntil(t, "the leader to serve both instances' Envoys' load", sums(leader.c))
	waitUntil(t, "the follower to serve both instances' Envoys' load", sums(follower.c))
	if p := follower.c.Fleet().Pools[0]; p.LoadAt.IsZero() || p.Hash.BalanceOn != fleet.BalanceOnPromptBytes {
		t.Fatalf("the follower's pool carries no load: %+v", p.Hash)
	}
	wantMetrics(t, scrape(t, "http://"+leader.c.AdminAddr()+"/metrics"), []metricWant{
		{"kvxds_load_reporting_instances", nil, 1},
	})
	if v, _ := sample(scrape(t, "http://"+follower.c.AdminAddr()+"/metrics"), "kvxds_load_reports_total", map[string]string{"result": "sent"}); v < 1 {
		t.Errorf("the follower counts %v reports sent", v)
	}
	if st := statusOf(t, leader.c.AdminAddr()).HA; st.LoadReporters != 1 {
		t.Errorf("the leader's status: %+v", st)
	}
	if st := statusOf(t, follower.c.AdminAddr()).HA; st.LoadReportsTo != "http://"+leader.c.AdminAddr() || st.LoadReportError != "" {
		t.Errorf("the follower's status: %+v", st)
	}

	// Another request on the follower's side reaches the leader's
	// table.
	envoyLoad(t, follower.c.XDSAddr(), "envoy-d", "r4", "10.0.0.2", 100)
	want["10.0.0.2:8000"] = 800
	waitUntil(t, "the leader to add the follower's new request", sums(leader.c))

	// The follower goes: the leader serves its own Envoy's figures
	// alone once the follower's last report expires.
	follower.stop()
	start := time.Now()
	want = map[string]uint64{"10.0.0.1:8000": 3000, "10.0.0.2:8000": 0}
	waitUntil(t, "the leader to drop the follower's figures", sums(leader.c))
	t.Logf("the follower's figures left the leader's tables %v after it stopped", time.Since(start).Round(time.Millisecond))
}

// Keys a pick filter sent away from their slot's replica, as each
// instance's Envoys log them (x-kvxds-went), are served by every
// instance, with the replica they went to; a key sent home again is
// forgotten, whichever instance's Envoys sent it away and home.
func TestWentKeysShared(t *testing.T) {
	leader := startController(t, "leader", loadPolicy(""), "")
	follower := startController(t, "follower", loadPolicy(fmt.Sprintf("ha { follow = %q }\n", "http://"+leader.c.AdminAddr())), "")
	went := func(c *Controller) string {
		out := map[string]string{}
		for k, w := range c.Fleet().Pools[0].Went {
			out[k] = w.Host
		}
		// And the bits of the keys placed, home or away.
		var bits []int
		seen := c.Fleet().Pools[0].Seen
		for i := range len(seen) * 4 {
			if v, err := strconv.ParseUint(seen[i/4:i/4+1], 16, 8); err == nil && v&(8>>(i%4)) != 0 {
				bits = append(bits, i)
			}
		}
		return fmt.Sprint(out, fmt.Sprintf(" %x", bits))
	}
	serves := func(want string) {
		t.Helper()
		for _, r := range []*Controller{leader.c, follower.c} {
			waitUntil(t, "every instance to serve keys sent away "+want, func() bool { return went(r) == want })
		}
	}
	a := openLogs(t, leader.c.XDSAddr(), "envoy-a", "kvxds-load/docs", []*datav3.HTTPAccessLogEntry{
		loadStart("r1", "10.0.0.1", 100, map[string]string{"x-kvxds-went": "fedcba98*"}),
	})
	t.Cleanup(func() { a() })
	b := openLogs(t, follower.c.XDSAddr(), "envoy-b", "kvxds-load/docs", []*datav3.HTTPAccessLogEntry{
		loadStart("r2", "10.0.0.2", 100, map[string]string{"x-kvxds-went": "0123abcd+"}),
		loadStart("r3", "10.0.0.2", 100, map[string]string{"x-kvxds-went": "not-a-key*"}),
	})
	t.Cleanup(func() { b() })
	serves("map[0123abcd:10.0.0.2:8000 fedcba98:10.0.0.1:8000] [123 fedc]")
	c := openLogs(t, follower.c.XDSAddr(), "envoy-c", "kvxds-load/docs", []*datav3.HTTPAccessLogEntry{
		loadStart("r4", "10.0.0.1", 100, map[string]string{"x-kvxds-went": "0123abcd"}),
	})
	t.Cleanup(func() { c() })
	serves("map[fedcba98:10.0.0.1:8000] [123 fedc]")
	// A key the leader's Envoy sent away, sent home through the
	// follower's: the follower's tombstone is newer than the leader's
	// entry, and the key leaves both instances' tables.
	d := openLogs(t, follower.c.XDSAddr(), "envoy-d", "kvxds-load/docs", []*datav3.HTTPAccessLogEntry{
		loadStart("r5", "10.0.0.2", 100, map[string]string{"x-kvxds-went": "fedcba98"}),
	})
	t.Cleanup(func() { d() })
	serves("map[] [123 fedc]")
}

// forwardPolicy has hot keys on a tenant header and places adapters,
// deciding every 100 ms.
func forwardPolicy(extra string) string {
	return extra + `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-tenant" }
    hot_keys { interval = "100ms" }
  }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"] }
  adapters {
    max_lora = 2
    interval = "100ms"
  }
}
`
}

// The leader decides hot keys and adapter placements from the requests
// its followers' Envoys log too: a tenant and an adapter that only a
// follower's Envoy sees become the leader's hot key and placed adapter,
// which every instance serves.
func TestFollowForwardsObservations(t *testing.T) {
	leader := startController(t, "leader", forwardPolicy(""), "")
	follower := startController(t, "follower", forwardPolicy(fmt.Sprintf("ha { follow = %q }\n", "http://"+leader.c.AdminAddr())), "")
	waitUntil(t, "the follower to report", func() bool { return statusOf(t, follower.c.AdminAddr()).HA.LoadReportsTo != "" })

	var entries []*datav3.HTTPAccessLogEntry
	for i := range 400 {
		h := map[string]string{"x-tenant": fmt.Sprint("tenant-", i)}
		if i%2 == 0 {
			h["x-tenant"] = "acme"
		}
		if i%4 == 0 {
			h["x-kvxds-adapter"] = "sql-lora"
		}
		entries = append(entries, &datav3.HTTPAccessLogEntry{
			CommonProperties: &datav3.AccessLogCommon{UpstreamCluster: "chat"},
			Request:          &datav3.HTTPRequestProperties{RequestHeaders: h},
		})
	}
	if err := openLogs(t, follower.c.XDSAddr(), "envoy-b", "kvxds/chat", entries)(); err != nil {
		t.Fatal(err)
	}
	decided := func(c *Controller) func() bool {
		return func() bool {
			p := c.Fleet().Pools[0]
			return len(p.HotKeys) == 1 && p.HotKeys[0].Value == "acme" && len(p.Adapters) == 1 && p.Adapters[0].Name == "sql-lora"
		}
	}
	waitUntil(t, "the leader to decide from the follower's logs", decided(leader.c))
	waitUntil(t, "the follower to serve the leader's decisions", decided(follower.c))
	// The requests are counted where they were logged.
	if got := statusOf(t, leader.c.AdminAddr()).Pools[0].HotKeys; got != nil && got.Requests != 0 {
		t.Errorf("the leader counts %d requests logged by the follower's Envoy as its own", got.Requests)
	}
}
