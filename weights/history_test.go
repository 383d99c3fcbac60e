package weights

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

func pageSignals(t testing.TB, name string) Signals {
	t.Helper()
	body, err := os.ReadFile("testdata/pages/" + name)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := BuiltinProfile(EngineVLLM)
	s, err := ParseSignals(p, "", body, "text/plain; version=0.0.4")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 || (math.IsNaN(a) && math.IsNaN(b)) }

// The window's figures from two recorded vLLM pages a minute apart.
// vllm_v1_later.txt is vllm_v1.txt (rendered by prometheus_client, see
// testdata/pages/gen) with these values moved on, as a minute of traffic
// would:
//
//	prefix_cache_queries_total  1,234,567 → 1,254,567   (+20,000)
//	prefix_cache_hits_total       987,654 → 1,003,654   (+16,000)
//	num_preemptions_total               7 → 10          (+3)
//	time_to_first_token_seconds, cumulative buckets (le: before → after, increase):
//	  0.04: 7 → 17 (+10)   0.06: 7 → 27 (+20)   0.08: 17 → 47 (+30)   0.1: 17 → 51 (+34)
//	  0.25: 37 → 74 (+37)  0.5: 45 → 85 (+40)   +Inf and every bound above 0.5: +40; count 52 → 92
//
// so, by hand:
//
//	hit rate 1m    = 16,000 / 20,000 = 0.8
//	hit rate total = 1,003,654 / 1,254,567 = 0.80000031883…
//	preemptions    = 3 / 60 s = 0.05/s
//	TTFT p95: rank 0.95 × 40 = 38 falls in (0.25, 0.5], which holds 40 − 37 = 3 of
//	          the requests after 37 below it: 0.25 + 0.25 × (38 − 37)/3 = 0.3333… s
//	TTFT p50: rank 20 falls in (0.04, 0.06], holding 20 − 10 = 10 after 10 below:
//	          0.04 + 0.02 × (20 − 10)/10 = 0.06 s
//	queue (mean of both pages, 3 waiting in each) = 3
func TestWindowFromRecordedPages(t *testing.T) {
	t0 := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	before, after := pageSignals(t, "vllm_v1.txt"), pageSignals(t, "vllm_v1_later.txt")
	h := NewHistory(time.Minute)
	h.Add(t0, &before)
	h.Add(t0.Add(time.Minute), &after)
	w := h.Window()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"hit rate 1m", w.HitRate, 0.8},
		{"hit rate total", w.HitRateTotal, 1003654.0 / 1254567.0},
		{"preemption rate", w.PreemptionRate, 0.05},
		{"ttft p95", w.TTFTP95, 0.25 + 0.25*(38-37)/3.0},
		{"ttft p50", w.TTFTP50, 0.06},
		{"queue", w.QueueDepth, 3},
		{"queries", w.PrefixQueries, 20000},
		{"hits", w.PrefixHits, 16000},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if math.Abs(w.HitRateTotal-0.8000003188) > 1e-9 {
		t.Errorf("hit rate total %v, hand-checked 0.8000003188", w.HitRateTotal)
	}
}

func TestWindow(t *testing.T) {
	t0 := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	type obs struct {
		at                        time.Duration
		queries, hits, pre, queue float64
		ttft                      []float64 // cumulative counts at 0.1, 1, +Inf
	}
	sig := func(o obs) Signals {
		s := nanSignals()
		s.PrefixQueries, s.PrefixHits, s.Preemptions, s.QueueDepth = o.queries, o.hits, o.pre, o.queue
		if o.ttft != nil {
			s.TTFT = &Histogram{Count: o.ttft[2], Buckets: []Bucket{{0.1, o.ttft[0]}, {1, o.ttft[1]}, {math.Inf(1), o.ttft[2]}}}
		}
		return s
	}
	nan := math.NaN()
	for _, tc := range []struct {
		name                       string
		obs                        []obs
		hitRate, pre, p95, queue   float64
		hitRateTotal, queriesDelta float64
	}{
		{"nothing yet", nil, nan, nan, nan, nan, nan, nan},
		{"one sample: totals only", []obs{{0, 100, 50, 0, 2, nil}}, nan, nan, nan, 2, 0.5, nan},
		{"steady", []obs{{0, 100, 50, 0, 2, nil}, {30 * time.Second, 200, 130, 3, 4, nil}},
			0.8, 0.1, nan, 3, 0.65, 100},
		// The engine restarted between the second and third scrape: its
		// counters start again from 0, and what they count since is new.
		{"counter reset", []obs{{0, 100, 50, 0, 0, nil}, {10 * time.Second, 200, 100, 2, 0, nil}, {20 * time.Second, 40, 40, 1, 0, nil}},
			(50 + 40) / 140.0, 3 / 20.0, nan, 0, 1, 140},
		// Samples older than the window no longer count.
		{"window slides", []obs{{0, 100, 0, 0, 10, nil}, {2 * time.Minute, 200, 0, 0, 1, nil}, {150 * time.Second, 300, 100, 0, 1, nil}},
			1, 0, nan, 1, 1.0 / 3, 100},
		{"no lookups: no hit rate", []obs{{0, 100, 50, 0, 0, nil}, {10 * time.Second, 100, 50, 0, 0, nil}}, nan, 0, nan, 0, 0.5, 0},
		// 10 new requests: 9 under 0.1 s, one in (1, +Inf): p95's rank 9.5
		// is in the +Inf bucket, reported as the highest finite bound.
		{"ttft beyond the last bound", []obs{{0, nan, nan, nan, nan, []float64{5, 5, 5}}, {10 * time.Second, nan, nan, nan, nan, []float64{14, 14, 15}}},
			nan, nan, 1, nan, nan, nan},
		// The histogram reset: the new one's counts are the increase;
		// rank 0.95 × 4 = 3.8 in (0.1, 1] holding 4 − 2: 0.1 + 0.9 × 1.8/2.
		{"ttft reset", []obs{{0, nan, nan, nan, nan, []float64{50, 60, 60}}, {10 * time.Second, nan, nan, nan, nan, []float64{2, 4, 4}}},
			nan, nan, 0.1 + 0.9*1.8/2, nan, nan, nan},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistory(time.Minute)
			for _, o := range tc.obs {
				s := sig(o)
				h.Add(t0.Add(o.at), &s)
			}
			w := h.Window()
			for _, c := range []struct {
				name      string
				got, want float64
			}{
				{"hit rate", w.HitRate, tc.hitRate}, {"preemption rate", w.PreemptionRate, tc.pre},
				{"ttft p95", w.TTFTP95, tc.p95}, {"queue", w.QueueDepth, tc.queue},
				{"hit rate total", w.HitRateTotal, tc.hitRateTotal}, {"queries", w.PrefixQueries, tc.queriesDelta},
			} {
				if !near(c.got, c.want) {
					t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
				}
			}
		})
	}
}

// A History stays bounded however often it is fed, and still covers the
// window.
func TestHistoryBounded(t *testing.T) {
	t0 := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	h := NewHistory(time.Minute)
	for i := range 10000 {
		s := nanSignals()
		s.PrefixQueries, s.PrefixHits = float64(i*10), float64(i*5)
		h.Add(t0.Add(time.Duration(i)*100*time.Millisecond), &s)
	}
	if len(h.samples) > historySlots {
		t.Fatalf("%d samples kept, at most %d", len(h.samples), historySlots)
	}
	if span := h.samples[len(h.samples)-1].t.Sub(h.samples[0].t); span < 55*time.Second || span > 65*time.Second {
		t.Errorf("samples span %v, want about a minute", span)
	}
	if w := h.Window(); !near(w.HitRate, 0.5) {
		t.Errorf("hit rate %v, want 0.5", w.HitRate)
	}
}

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name           string
		q              float64
		bounds, counts []float64
		want           float64
	}{
		{"first bucket starts at 0", 0.5, []float64{1, 2, inf}, []float64{10, 10, 10}, 0.5},
		{"interpolates", 0.75, []float64{1, 2, inf}, []float64{10, 20, 20}, 1.5},
		{"+Inf bucket", 0.99, []float64{1, 2, inf}, []float64{10, 20, 30}, 2},
		{"empty", 0.5, []float64{1, inf}, []float64{0, 0}, math.NaN()},
		{"no buckets", 0.5, nil, nil, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Quantile(tc.q, tc.bounds, tc.counts); !near(got, tc.want) {
				t.Errorf("Quantile = %v, want %v", got, tc.want)
			}
		})
	}
}

// The runner keeps what it scraped for View: a real metrics page served
// on loopback, the recorded vLLM page first and its later version after,
// gives the hand-checked figures of TestWindowFromRecordedPages (ratios
// and percentiles do not depend on the time between the scrapes), and a
// replica whose page fails shows its error.
func TestRunnerView(t *testing.T) {
	first, err := os.ReadFile("testdata/pages/vllm_v1.txt")
	if err != nil {
		t.Fatal(err)
	}
	later, err := os.ReadFile("testdata/pages/vllm_v1_later.txt")
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/broken" {
			http.Error(w, "engine is down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		if served.Add(1) == 1 {
			w.Write(first)
			return
		}
		w.Write(later)
	}))
	defer srv.Close()

	r := NewRunner(RunnerOptions{})
	defer r.Stop()
	profile, _ := BuiltinProfile(EngineVLLM)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Set(ctx, map[string]PoolScrape{"chat": {
		Config: DefaultConfig(), Profile: profile, Scrape: Scrape{Interval: 50 * time.Millisecond, Timeout: time.Second},
		Targets: []Target{{ID: "a", URL: srv.URL + "/metrics"}, {ID: "b", URL: srv.URL + "/broken"}},
	}})
	waitUntil(t, "a window over two pages", func() bool {
		return !math.IsNaN(r.View()["chat"].Replicas["a"].Window.HitRate)
	})
	v := r.View()["chat"]
	a := v.Replicas["a"]
	if !near(a.Window.HitRate, 0.8) || !near(a.Window.TTFTP95, 0.25+0.25/3) {
		t.Errorf("hit rate %v, TTFT p95 %v; want 0.8 and 0.3333", a.Window.HitRate, a.Window.TTFTP95)
	}
	if a.Signals.QueueDepth != 3 || a.LastError != nil || a.LastScrape.IsZero() || !a.HasDecision {
		t.Errorf("replica a: %+v", a)
	}
	b := v.Replicas["b"]
	if b.LastError == nil || KindOf(b.LastError) != FailHTTPStatus || !b.LastGood.IsZero() {
		t.Errorf("replica b: error %v, last good %v; want an HTTP status error and no good scrape", b.LastError, b.LastGood)
	}
}

func TestEventLog(t *testing.T) {
	t0 := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	var l eventLog
	l.add(t0, 1, 2)
	l.add(t0.Add(30*time.Minute), 1, 0)
	l.add(t0.Add(59*time.Minute), 0, 3)
	if e, m := l.sum(t0.Add(59 * time.Minute)); e != 2 || m != 5 {
		t.Errorf("after 59 min: %d escapes, %d moves; want 2 and 5", e, m)
	}
	if e, m := l.sum(t0.Add(61 * time.Minute)); e != 1 || m != 3 {
		t.Errorf("after 61 min: %d escapes, %d moves; want 1 and 3", e, m)
	}
	// The slot of minute 0 is reused an hour later.
	l.add(t0.Add(60*time.Minute), 4, 0)
	if e, _ := l.sum(t0.Add(60 * time.Minute)); e != 5 {
		t.Errorf("after 60 min: %d escapes, want 5", e)
	}
}
