package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/weights"
	"github.com/kvxds/kvxds/xds/server"
)

func recordedSignals(t testing.TB, page string) weights.Signals {
	t.Helper()
	body, err := os.ReadFile("../weights/testdata/pages/" + page)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := weights.BuiltinProfile(weights.EngineVLLM)
	s, err := weights.ParseSignals(p, "", body, "text/plain; version=0.0.4")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var statusT0 = time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)

// fixedStatusInput is a fleet of two pools: "chat" hashes over five
// replicas found by three kinds of source, scraped from recorded vLLM
// pages (serving, saturated, stale, draining, not scraped yet), and
// "batch" round-robins over one static replica without metrics.
func fixedStatusInput(t testing.TB) *statusInput {
	p := mustParse(t, `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics { engine = "vllm" }
}
pool "batch" {
  port           = 10001
  load_balancing = "round_robin"
  static { endpoints = ["10.0.1.1:8000"] }
}
`)
	discovered := []discovery.PoolTargets{
		{Pool: "chat", Targets: []fleet.Endpoint{
			{Host: "10.0.0.1", Port: 8000, Locality: fleet.Locality{Zone: "a"}},
			{Host: "10.0.0.2", Port: 8000, Locality: fleet.Locality{Zone: "a"}},
			{Host: "10.0.0.3", Port: 8000, Locality: fleet.Locality{Zone: "b"}, Weight: 2},
			{Host: "10.0.0.4", Port: 8000, Locality: fleet.Locality{Zone: "b"}, Health: fleet.Draining},
			{Host: "10.0.0.5", Port: 8000, Locality: fleet.Locality{Zone: "b"}, HashKey: "vllm-5"},
		}},
		{Pool: "batch", Targets: []fleet.Endpoint{{Host: "10.0.1.1", Port: 8000}}},
	}
	decisions := ha.Decisions{"chat": {
		"10.0.0.1:8000": {Weight: 4},
		"10.0.0.2:8000": {Weight: 2, Saturated: true},
		"10.0.0.3:8000": {Weight: 3, Stale: true},
		"10.0.0.4:8000": {Weight: 4},
		"vllm-5":        {Weight: 3},
	}}
	m, err := fleet.Prepare(Join(p, discovered, decisions))
	if err != nil {
		t.Fatal(err)
	}
	f := m.Fleet()

	// Replica 1 served the recorded page, then its later version a
	// minute on: hit rate 0.8, TTFT p95 0.333 s (see weights'
	// TestWindowFromRecordedPages for the arithmetic).
	before, after := recordedSignals(t, "vllm_v1.txt"), recordedSignals(t, "vllm_v1_later.txt")
	h1 := weights.NewHistory(0)
	h1.Add(statusT0.Add(-time.Minute), &before)
	h1.Add(statusT0, &after)
	// Replica 2's queue grew past the escape threshold; its hits and
	// lookups lag replica 1's.
	busy := after
	busy.QueueDepth, busy.PrefixQueries, busy.PrefixHits = 12, before.PrefixQueries+5000, before.PrefixHits+2000
	h2 := weights.NewHistory(0)
	h2.Add(statusT0.Add(-time.Minute), &before)
	h2.Add(statusT0, &busy)
	h3 := weights.NewHistory(0)
	h3.Add(statusT0.Add(-time.Minute), &before)
	h4 := weights.NewHistory(0)
	h4.Add(statusT0, &after)
	view := func(d weights.Decision, h *weights.History, lastErr error, reason string) weights.ReplicaView {
		sig, at := h.Latest()
		rv := weights.ReplicaView{Decision: d, HasDecision: true, Reason: reason, Signals: sig, LastGood: at,
			Window: h.Window(), LastScrape: statusT0, LastError: lastErr, Carried: sig.Carried(), PageRead: at}
		return rv
	}
	// Replica 1's trend: the same two pages, a step apart.
	var tr1 weights.Trend
	tr1.Add(statusT0.Add(-time.Minute), &before)
	tr1.Add(statusT0, &after)
	refused := &weights.ScrapeError{Kind: weights.FailRefused, Err: errors.New("dial tcp 10.0.0.3:8000: connect: connection refused")}
	views := map[string]weights.PoolView{"chat": {Escapes: 1, WeightMoves: 4, Changes: []weights.Change{
		{Time: statusT0.Add(-time.Minute), Replica: "10.0.0.2:8000", Kind: weights.ChangeEscape, From: 2, To: 2, Reason: "queue depth 12 ≥ 8"},
		{Time: statusT0.Add(-5 * time.Minute), Replica: "10.0.0.1:8000", Kind: weights.ChangeWeight, From: 3, To: 4, Reason: "free capacity: queue depth 3 of 8"},
	}, Replicas: map[string]weights.ReplicaView{
		"10.0.0.1:8000": withTrend(view(decisions["chat"]["10.0.0.1:8000"], h1, nil, ""), tr1.Points(statusT0)),
		"10.0.0.2:8000": view(decisions["chat"]["10.0.0.2:8000"], h2, nil, "queue depth 12 ≥ 8"),
		"10.0.0.3:8000": view(decisions["chat"]["10.0.0.3:8000"], h3, refused, "metrics older than 10s"),
		"10.0.0.4:8000": view(decisions["chat"]["10.0.0.4:8000"], h4, nil, ""),
		"vllm-5":        {Decision: decisions["chat"]["vllm-5"], HasDecision: true, Signals: before, Window: weights.NewHistory(0).Window()},
	}}}
	// Health since: everything appeared ten minutes ago, then replica 2
	// saturated and replica 3 went stale a minute ago.
	start := decisions["chat"]
	decisions0 := ha.Decisions{"chat": {"10.0.0.1:8000": start["10.0.0.1:8000"], "10.0.0.2:8000": {Weight: 2},
		"10.0.0.3:8000": {Weight: 3}, "10.0.0.4:8000": start["10.0.0.4:8000"], "vllm-5": start["vllm-5"]}}
	since := trackSince(nil, f, decisions0, statusT0.Add(-10*time.Minute))
	since = trackSince(since, f, decisions, statusT0.Add(-time.Minute))
	// What the pushes cost: replica 1's weight moved 3 → 4 five minutes
	// ago, replica 2 saturated a minute ago.
	decisions1 := ha.Decisions{"chat": maps.Clone(decisions0["chat"])}
	decisions1["chat"]["10.0.0.1:8000"] = weights.Decision{Weight: 3}
	var costs map[string][]pushCost
	var last map[string]pushCost
	var prev map[string]*poolTables
	for i, d := range []ha.Decisions{decisions1, decisions0, decisions} {
		at := statusT0.Add([]time.Duration{-10 * time.Minute, -5 * time.Minute, -time.Minute}[i])
		mi, err := fleet.Prepare(Join(p, discovered, d))
		if err != nil {
			t.Fatal(err)
		}
		r := &Reconciler{moved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "m"}, []string{"pool", "table", "client", "cause", "part"}), tables: prev}
		c := r.recordCosts(mi, at)
		prev = r.tables
		costs, last = keepCosts(costs, last, mi.Fleet(), c, at)
	}
	// Hot keys: one tenant hot, the requests the Envoys logged, a few
	// of them sent away from their key's first replica.
	hot := newHotState(prometheus.NewRegistry())
	hotFleet := f
	hotFleet.Pools = slices.Clone(f.Pools)
	for i := range hotFleet.Pools {
		if hotFleet.Pools[i].Name == "chat" {
			hp := &hotFleet.Pools[i]
			hp.Hash.Hot = &fleet.HotKeys{Max: 8, Interval: 10 * time.Second, HalfLife: time.Minute}
			hp.HotKeys = []fleet.HotKey{{Key: 0, Value: "tenant-acme", Share: 0.42, Spread: 64}, {Key: 0, Value: "tenant-globex", Share: 0.08, Spread: 2}}
		}
	}
	hot.update(hotFleet, m.Plan, nil)
	for range 25 {
		hot.pools["chat"].sketch.Observe(0, "tenant-acme", statusT0)
	}
	hot.seen["chat"].requests = 1200
	hot.seen["chat"].away[AwaySpread], hot.seen["chat"].away[AwayEscape], hot.seen["chat"].away[AwayBound] = 380, 24, 6
	return &statusInput{
		hot: hot.status(hotFleet),
		now: statusT0, policy: p, fleet: f, decisions: decisions, views: views,
		sources: map[string]map[string]string{
			"chat":  {"10.0.0.1:8000": "kubernetes", "10.0.0.2:8000": "kubernetes", "10.0.0.3:8000": "kubernetes", "10.0.0.4:8000": "kubernetes", "10.0.0.5:8000": "dns"},
			"batch": {"10.0.1.1:8000": "static"},
		},
		since: since, shares: tableShares(m), rule: status.DefaultHotspotRule,
		costs: costs, lastCost: last,
	}
}

func withTrend(rv weights.ReplicaView, pts []weights.TrendPoint) weights.ReplicaView {
	rv.Trend = pts
	return rv
}

// GET /api/v1/status?trend=1 for a fixed fleet, through a real HTTP
// server; without trend=1 the same body carries no trend.
// Regenerate with go test -update.
func TestStatusGolden(t *testing.T) {
	in := fixedStatusInput(t)
	st := buildStatus(in, "kvxds-0", status.HA{Mode: "standalone", Leading: true, Leader: "kvxds-0", Reachable: true})
	st.Instance.Version = "v0.0.0-test"
	st.Served = map[string]map[string]string{
		"envoy":       {"cds": "c1", "eds": "e1", "lds": "l1", "rds": "r1"},
		"grpc":        {"cds": "c2", "eds": "e2", "lds": "l1", "rds": "r1"},
		"grpc-nohash": {"cds": "c3", "eds": "e2", "lds": "l1", "rds": "r1"},
	}
	st.DataPlanes = []status.DataPlane{
		{NodeID: "app-1", Kind: "grpc", Address: "10.0.3.4:51234", Streams: 1, Connected: statusT0.Add(-time.Hour),
			ACKed: map[string]string{"cds": "c2", "eds": "e2", "lds": "l1", "rds": "r1"}},
		{NodeID: "envoy-1", Kind: "envoy", Address: "10.0.3.5:40000", Streams: 1, Connected: statusT0.Add(-time.Hour),
			ACKed:    map[string]string{"eds": "e1", "lds": "l1", "rds": "r1"},
			LastNACK: &status.NACK{Type: "cds", Version: "c1", Message: "cluster chat: unknown field", Time: statusT0.Add(-time.Minute)}},
		{NodeID: "py-1", Kind: "grpc-nohash", UserAgent: "gRPC C-core linux Python C-core 29.0.0 Python 1.51.1",
			NoHash:  "C-core 1.51 cannot hash; upgrade to 1.52 or later (grpc/grpc#31766)",
			Address: "10.0.3.6:50000", Streams: 1, Connected: statusT0.Add(-time.Hour),
			ACKed: map[string]string{"cds": "c3", "eds": "e2", "lds": "l1", "rds": "r1"}},
	}
	srv := httptest.NewServer(status.Handler(func() status.Status { return st }))
	defer srv.Close()
	get := func(query string) []byte {
		resp, err := http.Get(srv.URL + status.Path + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		return body
	}
	got := get("?trend=1")
	var without bytes.Buffer
	if err := status.Write(&without, status.WithoutTrends(st)); err != nil {
		t.Fatal(err)
	}
	if plain := get(""); !bytes.Equal(plain, without.Bytes()) || bytes.Contains(plain, []byte("trend_15m")) || !bytes.Contains(got, []byte("trend_15m")) {
		t.Errorf("the trend is not in the body exactly when asked for:\n%s", plain)
	}
	golden := "testdata/status/status.json"
	if *update {
		os.MkdirAll("testdata/status", 0o755)
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("status differs from %s (go test -update to accept):\n%s", golden, got)
	}

	// What the golden file shows, checked by hand.
	chat := st.Pools[1]
	if chat.Name != "chat" {
		t.Fatalf("pools %v", st.Pools)
	}
	// Lookups and hits over the minute: replica 1 20,000 and 16,000,
	// replica 2 5,000 and 2,000: (16,000 + 2,000)/(20,000 + 5,000).
	if got := *chat.HitRate1m; math.Abs(got-18000.0/25000) > 1e-12 {
		t.Errorf("pool hit rate %v, want 0.72", got)
	}
	// Mean queues over the minute: replica 1 (3+3)/2 = 3, replica 2
	// (3+12)/2 = 7.5, replica 3 3, replica 4 3: busiest 7.5 over a mean
	// of 16.5/4 = 4.125.
	if got := *chat.Balance; math.Abs(got-7.5/4.125) > 1e-12 {
		t.Errorf("balance %v, want 1.818", got)
	}
	var shares float64
	for _, r := range chat.Replicas {
		if r.TableShare != nil {
			shares += *r.TableShare
		}
	}
	if math.Abs(shares-1) > 1e-9 {
		t.Errorf("table shares sum to %v, want 1", shares)
	}
	// Replica 1's trend: a step with the first page's queue only, then
	// one with the minute's hit rate, 16,000 hits of 20,000 lookups.
	var r1 status.Replica
	for _, r := range chat.Replicas {
		if r.ID == "10.0.0.1:8000" {
			r1 = r
		}
	}
	if tr := r1.Trend; tr == nil || tr.StepSeconds != weights.TrendStep.Seconds() || len(tr.Points) != 2 ||
		tr.Points[0].HitRate != nil || *tr.Points[0].QueueDepth != 3 || math.Abs(*tr.Points[1].HitRate-0.8) > 1e-12 {
		t.Errorf("replica 1's trend %+v", r1.Trend)
	}
	if d := chat.RecentDecisions; len(d) != 2 || d[0].Kind != status.Escape || d[1].Kind != status.WeightMove || d[1].ToMultiplier != 4 {
		t.Errorf("recent decisions %+v", d)
	}
}

func TestHotspotRule(t *testing.T) {
	n := func(v float64) *float64 { return &v }
	rule := status.DefaultHotspotRule
	for _, tc := range []struct {
		name                    string
		balance, hitRate, queue *float64
		want                    bool
	}{
		{"hot tenant under affinity", n(2.7), n(0.93), n(12), true},
		{"escape hatch on", n(1.18), n(0.82), n(5), false},
		{"round robin: no affinity to blame", n(2.5), n(0.22), n(10), false},
		{"idle fleet: one queued request", n(8), n(0.9), n(1), false},
		{"unknown hit rate", n(3), nil, n(10), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rule.Hotspot(tc.balance, tc.hitRate, tc.queue); got != tc.want {
				t.Errorf("Hotspot = %v, want %v", got, tc.want)
			}
		})
	}
}

// pageReplica serves the recorded vLLM page, then its later version, on
// a loopback address.
func pageReplica(t *testing.T, addr string) string {
	t.Helper()
	first, err := os.ReadFile("../weights/testdata/pages/vllm_v1.txt")
	if err != nil {
		t.Fatal(err)
	}
	later, err := os.ReadFile("../weights/testdata/pages/vllm_v1_later.txt")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		if n.Add(1) == 1 {
			w.Write(first)
			return
		}
		w.Write(later)
	}))
	srv.Listener.Close()
	srv.Listener = lis
	srv.Start()
	t.Cleanup(srv.Close)
	return lis.Addr().String()
}

// The reconciler's status: replicas found by the policy's static block,
// scraped from real pages, their shares of the ring, and the pool series
// it exports, which follow membership.
func TestReconcilerStatus(t *testing.T) {
	var addrs []string
	for i := range 3 {
		addrs = append(addrs, pageReplica(t, fmt.Sprintf("127.0.0.%d:0", i+1)))
	}
	policyFor := func(addrs []string) string {
		return fmt.Sprintf(`
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = ["%s"] }
  metrics { interval = "100ms" }
}
`, strings.Join(addrs, `", "`))
	}
	reg := prometheus.NewRegistry()
	r := New(Options{Sink: server.New(server.Options{}), Logger: hclog.NewNullLogger(), Registerer: reg, ID: "kvxds-test"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.Close()
	if err := r.Apply(ctx, mustParse(t, policyFor(addrs))); err != nil {
		t.Fatal(err)
	}
	go r.Run(ctx)
	waitFor(t, "a pool hit rate", func() bool {
		p := r.Status().Pools[0]
		return p.HitRate1m != nil && p.Balance != nil
	})
	st := r.Status()
	pool := st.Pools[0]
	if st.Instance.ID != "kvxds-test" || pool.Name != "chat" || pool.Engine != "vllm" || len(pool.Replicas) != 3 {
		t.Fatalf("status %+v", st)
	}
	if math.Abs(*pool.HitRate1m-0.8) > 1e-9 {
		t.Errorf("pool hit rate %v, want 0.8", *pool.HitRate1m)
	}
	for _, rep := range pool.Replicas {
		if rep.Source != "static" || rep.Health != status.Serving || rep.TableShare == nil || rep.Multiplier == 0 || rep.LastScrape == nil {
			t.Errorf("replica %+v: want a static, serving, scraped replica with a share and a multiplier", rep)
		}
	}
	if n := testutil.CollectAndCount(reg, "kvxds_replica_table_share"); n != 3 {
		t.Errorf("%d table share series, want 3", n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP kvxds_pool_hotspot 1 while a pool's balance is above 2 with a hit rate of at least 0.5 and the busiest replica queueing at least 2 requests.
# TYPE kvxds_pool_hotspot gauge
kvxds_pool_hotspot{pool="chat"} 0
`), "kvxds_pool_hotspot"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "kvxds_pool_hit_rate"); n != 1 {
		t.Errorf("%d pool hit rate series, want 1", n)
	}

	// A replica that leaves takes its series along.
	if err := r.Apply(ctx, mustParse(t, policyFor(addrs[:2]))); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "kvxds_replica_table_share"); n != 2 {
		t.Errorf("%d table share series after a replica left, want 2", n)
	}
	if got := r.Status().Pools[0].Replicas; len(got) != 2 {
		t.Errorf("%d replicas after one left, want 2", len(got))
	}
}

// BenchmarkStatus builds the status of a pool of 1,000 scraped replicas,
// each with a minute of history, and encodes it as /api/v1/status does.
func BenchmarkStatus(b *testing.B) {
	in := benchStatusInput(b, 1000)
	b.Run("build", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buildStatus(in, "kvxds-0", status.HA{Mode: "standalone"})
		}
	})
	b.Run("build+json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			status.Write(io.Discard, buildStatus(in, "kvxds-0", status.HA{Mode: "standalone"}))
		}
	})
	b.Run("table shares", func(b *testing.B) {
		// Once per push, not per status.
		m, err := fleet.Prepare(in.fleet)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			tableShares(m)
		}
	})
	b.Run("views", func(b *testing.B) {
		// What the runner's View costs: every replica's window.
		hs := make([]*weights.History, 0, 1000)
		before, after := recordedSignals(b, "vllm_v1.txt"), recordedSignals(b, "vllm_v1_later.txt")
		for range 1000 {
			h := weights.NewHistory(0)
			for j := range 30 {
				s := before
				if j >= 15 {
					s = after
				}
				h.Add(statusT0.Add(time.Duration(j)*2*time.Second), &s)
			}
			hs = append(hs, h)
		}
		b.ReportAllocs()
		for b.Loop() {
			for _, h := range hs {
				h.Window()
			}
		}
	})
}

func benchStatusInput(b *testing.B, n int) *statusInput {
	p := mustParse(b, `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics { engine = "vllm" }
}
`)
	var ts []fleet.Endpoint
	dec := map[string]weights.Decision{}
	views := map[string]weights.ReplicaView{}
	sources := map[string]string{}
	before, after := recordedSignals(b, "vllm_v1.txt"), recordedSignals(b, "vllm_v1_later.txt")
	for i := range n {
		tg := fleet.Endpoint{Host: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 8000}
		ts = append(ts, tg)
		id := tg.Address()
		dec[id] = weights.Decision{Weight: uint32(1 + i%4)}
		h := weights.NewHistory(0)
		h.Add(statusT0.Add(-time.Minute), &before)
		h.Add(statusT0, &after)
		sig, at := h.Latest()
		views[id] = weights.ReplicaView{Decision: dec[id], HasDecision: true, Signals: sig, LastGood: at, LastScrape: at, Window: h.Window(),
			Carried: sig.Carried(), PageRead: at}
		sources[id] = "kubernetes"
	}
	decisions := ha.Decisions{"chat": dec}
	m, err := fleet.Prepare(Join(p, []discovery.PoolTargets{{Pool: "chat", Targets: ts}}, decisions))
	if err != nil {
		b.Fatal(err)
	}
	f := m.Fleet()
	return &statusInput{
		now: statusT0, policy: p, fleet: f, decisions: decisions,
		views:   map[string]weights.PoolView{"chat": {Replicas: views}},
		sources: map[string]map[string]string{"chat": sources},
		since:   trackSince(nil, f, decisions, statusT0), shares: tableShares(m), rule: status.DefaultHotspotRule,
	}
}

// A replica's table share is of the table it serves in: an exclusive
// group's members divide the group's ring, the rest the pool's; members of
// a group that is not exclusive keep their share of the pool's ring.
func TestTableSharesGroups(t *testing.T) {
	for _, exclusive := range []bool{true, false} {
		t.Run(fmt.Sprint("exclusive=", exclusive), func(t *testing.T) {
			_, m, members := groupFixture(t, 6, exclusive, "")
			var inGroup, inPool float64
			for id, s := range tableShares(m)["chat"] {
				if s <= 0 {
					t.Errorf("%s: share %v", id, s)
				}
				if exclusive && members[id] {
					inGroup += s
				} else {
					inPool += s
				}
			}
			if math.Abs(inPool-1) > 1e-9 || (exclusive && math.Abs(inGroup-1) > 1e-9) {
				t.Errorf("shares sum to %v in the pool's table and %v in the group's", inPool, inGroup)
			}
		})
	}
}

// Balance divides queues only where there is load to compare: queues of
// 0 and 1 (an idle pool) give none, with the reason; one replica queueing
// 6 while the rest are idle gives 4.
func TestBalanceNeedsLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		queues  []float64
		balance *float64
		note    string
	}{
		{"idle", []float64{0, 1, 0, 0}, nil, "too little load to compare: the busiest replica queues 1 on average (balance needs 2)"},
		{"one busy", []float64{6, 0, 0, 0}, status.Number(4), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fixedStatusInput(t)
			page := recordedSignals(t, "vllm_v1.txt")
			ids := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"}
			reps := map[string]weights.ReplicaView{}
			for i, id := range ids {
				s := page
				s.QueueDepth = tc.queues[i]
				h := weights.NewHistory(0)
				h.Add(statusT0, &s)
				sig, at := h.Latest()
				reps[id] = weights.ReplicaView{Signals: sig, LastGood: at, LastScrape: at, Window: h.Window(), Carried: sig.Carried(), PageRead: at}
			}
			in.views = map[string]weights.PoolView{"chat": {Replicas: reps}}
			chat := buildPools(in)[1]
			if (chat.Balance == nil) != (tc.balance == nil) || chat.Balance != nil && *chat.Balance != *tc.balance {
				t.Errorf("balance %v, want %v", chat.Balance, tc.balance)
			}
			if chat.BalanceNote != tc.note {
				t.Errorf("note %q, want %q", chat.BalanceNote, tc.note)
			}
			if chat.Hotspot {
				t.Error("hotspot")
			}
		})
	}
}

// A wrong engine shows in the status at the first scrape: two replicas
// serve vLLM's page and one TGI's, scraped as vLLM.
func TestReconcilerSignalCoverage(t *testing.T) {
	tgi, err := os.ReadFile("../weights/testdata/pages/tgi.txt")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(tgi)
	}))
	srv.Listener.Close()
	srv.Listener = lis
	srv.Start()
	defer srv.Close()
	addrs := []string{pageReplica(t, "127.0.0.1:0"), pageReplica(t, "127.0.0.2:0"), lis.Addr().String()}
	r := New(Options{Sink: server.New(server.Options{}), Logger: hclog.NewNullLogger(), Registerer: prometheus.NewRegistry(), ID: "kvxds-test"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.Close()
	if err := r.Apply(ctx, mustParse(t, fmt.Sprintf(`
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = ["%s"] }
  metrics { interval = "100ms" }
}
`, strings.Join(addrs, `", "`)))); err != nil {
		t.Fatal(err)
	}
	go r.Run(ctx)
	waitFor(t, "three pages read", func() bool { return r.Status().Pools[0].PagesRead == 3 })
	pool := r.Status().Pools[0]
	for _, c := range pool.Signals {
		want := 1
		if c.Signal == weights.SignalPrefixHitRate {
			want = 0 // the counters stand in for it
		}
		if c.Missing != want {
			t.Errorf("%s missing on %d, want %d", c.Signal, c.Missing, want)
		}
	}
	for _, rep := range pool.Replicas {
		tgiPage := rep.Address == lis.Addr().String()
		if tgiPage != slices.Contains(rep.SignalsMissing, weights.SignalKVOccupancy) || tgiPage != (len(rep.SignalsFound) == 0) {
			t.Errorf("%s: found %v, missing %v", rep.Address, rep.SignalsFound, rep.SignalsMissing)
		}
	}
	notes := pool.SignalNotes()
	if len(notes) == 0 || notes[0].Level != status.Warn || !strings.HasPrefix(notes[0].Text, "queue_depth: missing on 1 of 3 replicas; ") {
		t.Errorf("notes %+v", notes)
	}
}
