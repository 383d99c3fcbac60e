package page

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvxds/kvxds/status"
)

var pageT0 = time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)

func num(v float64) *float64 { return &v }

// trendOf is a 15-minute trend whose queue climbs 0, 1, 2, … and whose
// hit rate is missing from step gapAt on for two steps.
func trendOf(end time.Time, gapAt int) *status.Trend {
	tr := &status.Trend{StepSeconds: 30}
	for i := range 30 {
		p := status.TrendPoint{Time: end.Add(-15 * time.Minute).Add(time.Duration(i) * 30 * time.Second),
			QueueDepth: num(float64(i)), TTFTP95: num(0.05 + float64(i)/100)}
		if i < gapAt || i >= gapAt+2 {
			p.HitRate = num(0.9)
		}
		tr.Points = append(tr.Points, p)
	}
	return tr
}

// fleetStatus is one pool of n replicas: replica 3 saturated, replica 5
// stale with a failed scrape, replica 7 draining, the others serving
// with queue depth i%10; and two data planes, one rejecting a cluster.
func fleetStatus(n int) *status.Status {
	st := &status.Status{Time: pageT0, Instance: status.Instance{ID: "kvxds-0", Version: "v1.2.3"}, HA: status.HA{Mode: "standalone", Leading: true, Reachable: true},
		HotspotRule: status.DefaultHotspotRule,
		Served:      map[string]map[string]string{"envoy": {"cds": "c2", "eds": "e2", "lds": "l1", "rds": "r1"}}}
	p := status.Pool{Name: "chat", Balancer: "hash", Algorithm: "maglev", Engine: "vllm", HitRate1m: num(0.87), Balance: num(1.3), Escapes1h: 1,
		RecentDecisions: []status.Decision{{Time: pageT0.Add(-40 * time.Second), Replica: "replica-3", Kind: status.Escape, FromMultiplier: 2, ToMultiplier: 2, Reason: "queue depth 12 ≥ 8"}},
		Moved: &status.Moved{Last: &status.MovedPush{Time: pageT0.Add(-40 * time.Second), Cause: status.CauseHealth, Replicas: 1,
			Shares: []status.MovedShare{{Table: "chat", Clients: []string{"envoy"}, Own: 0.06, Collateral: 0.003}}},
			Pushes1h: 1, Total1h: []status.MovedShare{{Table: "chat", Clients: []string{"envoy"}, Own: 0.06, Collateral: 0.003}}}}
	for i := range n {
		r := status.Replica{ID: fmt.Sprintf("replica-%d", i), Address: fmt.Sprintf("10.0.0.%d:8000", i), Source: "static", Health: status.Serving,
			StaticWeight: 1, Multiplier: 2, Weight: 2, TableShare: num(1 / float64(n)),
			QueueDepth: num(float64(i % 10)), KVOccupancy: num(0.4), HitRate1m: num(0.9), TTFTP95: num(0.08),
			LastScrape: &status.Scrape{Time: pageT0.Add(-time.Second), OK: true}, Trend: trendOf(pageT0, 10)}
		switch i {
		case 3:
			r.Health, r.Reason, r.Since, r.QueueDepth, r.TableShare = status.Saturated, "queue depth 12 ≥ 8", pageT0.Add(-40*time.Second), num(12), num(0)
		case 5:
			r.Health, r.Reason, r.Since = status.Stale, "metrics older than 10s", pageT0.Add(-20*time.Second)
			r.LastScrape = &status.Scrape{Time: pageT0.Add(-time.Second), Error: "dial tcp 10.0.0.5:8000: connect: connection refused"}
		case 7:
			r.Health, r.Reason = status.Draining, "going away (discovery)"
		}
		p.Replicas = append(p.Replicas, r)
	}
	st.Pools = []status.Pool{p}
	st.DataPlanes = []status.DataPlane{
		{NodeID: "envoy-ok", Kind: "envoy", Address: "10.0.3.4:5000", Streams: 1, Connected: pageT0.Add(-time.Hour),
			ACKed: map[string]string{"cds": "c2", "eds": "e2", "lds": "l1", "rds": "r1"}},
		{NodeID: "envoy-bad", Kind: "envoy", Address: "10.0.3.5:5000", Streams: 1, Connected: pageT0.Add(-time.Hour),
			ACKed:    map[string]string{"cds": "c1", "eds": "e2", "lds": "l1", "rds": "r1"},
			LastNACK: &status.NACK{Type: "cds", Version: "c2", Message: `cluster "chat": <unknown> field`, Time: pageT0.Add(-time.Minute)}},
		{NodeID: "py-1", Kind: "grpc-nohash", Address: "10.0.3.6:5000", Streams: 1, Connected: pageT0.Add(-time.Hour),
			UserAgent: "gRPC C-core linux Python C-core 29.0.0 Python 1.51.1",
			NoHash:    "C-core 1.51 cannot hash; upgrade to 1.52 or later (grpc/grpc#31766)"},
	}
	return st
}

var rowRE = regexp.MustCompile(`data-replica="([^"]+)" data-health="([^"]+)"`)

func rows(page string) (ids, healths []string) {
	for _, m := range rowRE.FindAllStringSubmatch(page, -1) {
		ids = append(ids, m[1])
		healths = append(healths, m[2])
	}
	return ids, healths
}

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name      string
		replicas  int
		opts      Options
		wantRows  int
		wantFirst []status.Health // the first rows' healths
		wantText  []string
		notText   []string
		edit      func(*status.Pool)
		ha        *status.HA
	}{{
		name: "small pool: every replica, troubled ones first", replicas: 10, opts: Options{Refresh: 5}, wantRows: 10,
		wantFirst: []status.Health{status.Saturated, status.Stale, status.Draining, status.Serving},
		wantText: []string{"queue depth 12 ≥ 8", "since 11:59:20 (40s ago)", "connection refused", "hit rate 1m <b class=\"pool-hit-rate\">87.0%</b>",
			"no hotspot", "reload every 5 s", "out of the hash table", "rejecting cds",
			`cluster &#34;chat&#34;: &lt;unknown&gt; field`, "<polyline", "<script>",
			"no session affinity: C-core 1.51 cannot hash; upgrade to 1.52 or later", "C-core 29.0.0 Python 1.51.1",
			`<p class="moved dim">last push (health change, 1 replica, 40s ago) cost envoy 6.30% of sessions (own 6.00%, collateral 0.30%)</p>`,
			`<p class="moved dim">last hour (1 push) cost envoy 6.30% of sessions (own 6.00%, collateral 0.30%)</p>`},
		notText: []string{"more replicas not listed", "<unknown>"},
	}, {
		name: "1,000 replicas: the first 50 and a count", replicas: 1000, opts: Options{Refresh: 5}, wantRows: Replicas,
		wantFirst: []status.Health{status.Saturated, status.Stale, status.Draining, status.Serving},
		wantText:  []string{"950 more replicas not listed (950 serving)", `href="?all=1"`, "show all 1000"},
	}, {
		name: "1,000 replicas, all=1, no reload", replicas: 1000, opts: Options{All: true}, wantRows: 1000,
		wantText: []string{"show the first 50 only"},
		notText:  []string{"more replicas not listed", "<script>"},
	}, {
		name: "idle pool whose engine lacks a signal", replicas: 4, opts: Options{}, wantRows: 4,
		edit: func(p *status.Pool) {
			p.Balance, p.BalanceNote = nil, "too little load to compare: the busiest replica queues 1 on average (balance needs 2)"
			p.PagesRead = 4
			p.Signals = []status.SignalCoverage{
				{Signal: "queue_depth", Metrics: []string{"vllm:num_requests_waiting"}, Use: "weights and escape hatch", Found: 4},
				{Signal: "kv_occupancy", Metrics: []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}, Use: "weights and escape hatch", Found: 1, Missing: 3},
				{Signal: "ttft", Metrics: []string{"vllm:time_to_first_token_seconds"}, Use: "status", Missing: 4},
			}
			p.Replicas[0].SignalsMissing = []string{"kv_occupancy", "ttft"}
		},
		wantText: []string{`<span class="dim balance" title="too little load`, "– (too little load to compare: the busiest replica queues 1 on average (balance needs 2))",
			`<p class="signal-note warn">kv_occupancy: missing on 3 of 4 replicas; weights and the escape hatch go without it: check the metrics block&#39;s engine, path and model (looked for vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc)</p>`,
			`<p class="signal-note ok">ttft: missing on every replica, not shown (looked for vllm:time_to_first_token_seconds)</p>`,
			"page lacks kv_occupancy, ttft"},
		notText: []string{`<b class="balance">`, "Every signal"},
	}, {
		name: "every signal found", replicas: 2, opts: Options{}, wantRows: 2,
		edit: func(p *status.Pool) {
			p.PagesRead = 2
			p.Signals = []status.SignalCoverage{{Signal: "queue_depth", Metrics: []string{"vllm:num_requests_waiting"}, Use: "weights and escape hatch", Found: 2}}
		},
		wantText: []string{`<b class="balance">1.30</b>`, "Every signal the vllm profile reads was found on each of the 2 pages read."},
	}, {
		name: "hotspot, on a follower that cannot reach its leader", replicas: 2, wantRows: 2,
		edit: func(p *status.Pool) { p.Balance, p.Hotspot = num(2.64), true },
		ha:   &status.HA{Mode: "kubernetes lease infra/kvxds", Leader: "kvxds-1", Error: "connection refused"},
		wantText: []string{`<b class="balance">2.64</b>`, `<span class="flag bad hotspot" title="the busiest replica queues 2.6× the mean`,
			`<p class="nack">Hotspot: the busiest replica queues 2.6× the mean while the hit rate is 87.0% (rule: balance above 2, hit rate at least 0.5, busiest queue at least 2)</p>`,
			"kubernetes lease infra/kvxds, following kvxds-1 (unreachable: connection refused)"},
		notText: []string{"no hotspot"},
	}, {
		name: "hot keys, hashed", replicas: 2, wantRows: 2,
		edit: func(p *status.Pool) {
			p.HotKeys = &status.HotKeys{
				Keys:     []status.HotKey{{Key: 0, KeyName: "header x-tenant", Value: "3f2a9c1b", Share: 0.48, Spread: 4}},
				Requests: 1000, Away: map[string]uint64{status.AwaySpread: 300, status.AwayBound: 10},
			}
		},
		wantText: []string{`<p class="moved hot-keys">hot keys of 1000 keyed requests logged: 3f2a9c1b (header x-tenant) 48.0% spread over 4</p>`,
			`<p class="moved hot-keys">away from their key&#39;s first replica: 31.0% (spread 30.0%, escape 0.0%, followed 0.0%, bound 1.0%)</p>`},
	}, {
		name: "no hot keys on", replicas: 2, wantRows: 2,
		notText: []string{"hot-keys"},
	}, {
		name: "hotspot without its figures", replicas: 2, wantRows: 2,
		edit:     func(p *status.Pool) { p.Balance, p.HitRate1m, p.Hotspot = nil, nil, true },
		wantText: []string{`<span class="dim balance" title="">–</span>`, "hit rate 1m <b class=\"pool-hit-rate\">–</b>", `<p class="nack">Hotspot: flagged without its figures (rule: `},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			st := fleetStatus(tc.replicas)
			if tc.edit != nil {
				tc.edit(&st.Pools[0])
			}
			if tc.ha != nil {
				st.HA = *tc.ha
			}
			if err := Render(&buf, st, tc.opts); err != nil {
				t.Fatal(err)
			}
			page := buf.String()
			ids, healths := rows(page)
			if len(ids) != tc.wantRows {
				t.Errorf("%d replica rows, want %d", len(ids), tc.wantRows)
			}
			for i, h := range tc.wantFirst {
				if i >= len(healths) || healths[i] != string(h) {
					t.Errorf("row %d is %v, want %s (rows %v)", i, healths[i:min(i+1, len(healths))], h, healths[:min(len(healths), 5)])
				}
			}
			// Among serving replicas, the longest queue first.
			if tc.wantRows > 10 && ids[3] != "replica-109" {
				t.Errorf("first serving replica %s does not have the longest queue", ids[3])
			}
			for _, s := range tc.wantText {
				if !strings.Contains(page, s) {
					t.Errorf("page lacks %q", s)
				}
			}
			for _, s := range tc.notText {
				if strings.Contains(page, s) {
					t.Errorf("page has %q", s)
				}
			}
			if strings.Contains(page, "http://") || strings.Contains(page, "https://") || strings.Contains(page, "src=") {
				t.Error("the page refers to another origin")
			}
		})
	}
}

var svgPoint = regexp.MustCompile(`(?:points="([^"]*)"|cx="([^"]+)" cy="([^"]+)")`)

func TestSparkline(t *testing.T) {
	end := pageT0
	get := func(p *status.TrendPoint) *float64 { return p.HitRate }
	for _, tc := range []struct {
		name          string
		trend         *status.Trend
		wantLines     int
		wantEmpty     bool
		wantTitleHas  string
		wantRightmost float64 // x of the latest point
	}{
		{name: "no values", trend: &status.Trend{StepSeconds: 30, Points: []status.TrendPoint{{Time: end.Add(-time.Minute)}}}, wantEmpty: true},
		{name: "a gap splits the line", trend: trendOf(end, 10), wantLines: 2, wantTitleHas: "hit rate, last 15 min: 90.0% to 90.0%", wantRightmost: 94.4},
		{name: "one run", trend: trendOf(end, 40), wantLines: 1, wantRightmost: 94.4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svg := string(Sparkline(tc.trend.Points, 30*time.Second, end, get, 1, "hit rate", status.PageFormat.Percent))
			if tc.wantEmpty {
				if svg != "" {
					t.Errorf("want no sparkline, got %s", svg)
				}
				return
			}
			if n := strings.Count(svg, "<polyline"); n != tc.wantLines {
				t.Errorf("%d lines, want %d: %s", n, tc.wantLines, svg)
			}
			if !strings.Contains(svg, tc.wantTitleHas) {
				t.Errorf("title: %s", svg)
			}
			// Every coordinate lies inside the box.
			var maxX float64
			for _, m := range svgPoint.FindAllStringSubmatch(svg, -1) {
				pairs := strings.Fields(m[1])
				if m[1] == "" {
					pairs = []string{m[2] + "," + m[3]}
				}
				for _, p := range pairs {
					var x, y float64
					if _, err := fmt.Sscanf(p, "%g,%g", &x, &y); err != nil {
						t.Fatalf("point %q: %v", p, err)
					}
					if x < 0 || x > sparkWidth || y < 0 || y > sparkHeight {
						t.Errorf("point %v,%v outside %dx%d", x, y, sparkWidth, sparkHeight)
					}
					maxX = max(maxX, x)
				}
			}
			// The latest step starts 30 s before the end: its middle is at
			// 14.75 of 15 minutes.
			if maxX != tc.wantRightmost {
				t.Errorf("rightmost point at x=%v, want %v", maxX, tc.wantRightmost)
			}
		})
	}
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler(func() status.Status { return *fleetStatus(3) }))
	defer srv.Close()
	for _, tc := range []struct {
		query    string
		wantCode int
		wantBody string
	}{
		{"", http.StatusOK, "reload every 5 s"},
		{"?refresh=2", http.StatusOK, "reload every 2 s"},
		{"?refresh=0", http.StatusOK, "replica-2"},
		{"?refresh=soon", http.StatusBadRequest, "whole number of seconds"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			resp, err := http.Get(srv.URL + "/" + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantCode || !strings.Contains(string(body), tc.wantBody) {
				t.Errorf("%s: %s, body lacks %q", tc.query, resp.Status, tc.wantBody)
			}
			if tc.wantCode == http.StatusOK {
				if ct, csp := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"); ct != "text/html; charset=utf-8" || !strings.Contains(csp, "default-src 'none'") {
					t.Errorf("Content-Type %q, Content-Security-Policy %q", ct, csp)
				}
			}
		})
	}
}

// Rendering the page of 1,000 replicas with their trends, all listed.
func BenchmarkRender1000(b *testing.B) {
	st := fleetStatus(1000)
	for _, all := range []bool{false, true} {
		b.Run(fmt.Sprintf("all=%v", all), func(b *testing.B) {
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := Render(&buf, st, Options{All: all, Refresh: 5}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes")
		})
	}
}

// A pool whose Envoys bound prompt bytes says so beside its algorithm.
func TestPageBalanceOn(t *testing.T) {
	st := fleetStatus(3)
	p := &st.Pools[0]
	if got := newPagePool(st, p, false).Kind; got != "hash · maglev" {
		t.Errorf("kind %q, want %q", got, "hash · maglev")
	}
	p.BalanceOn = "prompt_bytes"
	if got := newPagePool(st, p, false).Kind; got != "hash · maglev · bound on prompt bytes" {
		t.Errorf("kind %q, want %q", got, "hash · maglev · bound on prompt bytes")
	}
}
