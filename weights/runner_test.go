package weights

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The runner scrapes each pool it is given from a real metrics page,
// keeps its decisions, re-points a pool without forgetting them, and
// stops a pool (and drops its series) once it is no longer given.
func TestRunner(t *testing.T) {
	page, err := os.ReadFile("testdata/pages/vllm_v1.txt")
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(page)
	}))
	defer srv.Close()

	reg := prometheus.NewRegistry()
	var changes atomic.Int64
	r := NewRunner(RunnerOptions{Registerer: reg, OnChange: func() { changes.Add(1) }})
	defer r.Stop()
	profile, _ := BuiltinProfile(EngineVLLM)
	spec := PoolScrape{
		Config:  DefaultConfig(),
		Profile: profile,
		Scrape:  Scrape{Interval: 50 * time.Millisecond, Timeout: time.Second},
		Targets: []Target{{ID: "a", URL: srv.URL + "/metrics"}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Set(ctx, map[string]PoolScrape{"chat": spec})
	waitUntil(t, "a decision for a", func() bool { _, ok := r.Decisions()["chat"]["a"]; return ok })
	if changes.Load() == 0 {
		t.Error("OnChange was not called")
	}

	// New targets, same settings: the pool keeps running and its state.
	spec.Targets = []Target{{ID: "a", URL: srv.URL + "/metrics"}, {ID: "b", URL: srv.URL + "/metrics"}}
	r.Set(ctx, map[string]PoolScrape{"chat": spec})
	if _, ok := r.Decisions()["chat"]["a"]; !ok {
		t.Fatal("re-pointing a pool forgot its decisions")
	}
	waitUntil(t, "a decision for b", func() bool { _, ok := r.Decisions()["chat"]["b"]; return ok })

	// Changed settings restart the pool: its decisions start over.
	old := r.pools["chat"]
	r.Set(ctx, map[string]PoolScrape{"chat": spec})
	if r.pools["chat"] != old {
		t.Fatal("an unchanged pool was restarted")
	}
	spec.Config.MaxQueueDepth++
	r.Set(ctx, map[string]PoolScrape{"chat": spec})
	if r.pools["chat"] == old {
		t.Fatal("a pool whose settings changed was not restarted")
	}
	select {
	case <-old.done:
	default:
		t.Fatal("the replaced pool is still running")
	}
	waitUntil(t, "decisions after the restart", func() bool { return len(r.Decisions()["chat"]) == 2 })

	// A pool no longer given stops, and its series go.
	if n := testutil.CollectAndCount(reg, "kvxds_replica_weight_multiplier"); n != 2 {
		t.Fatalf("weight series = %d, want 2", n)
	}
	r.Set(ctx, nil)
	if len(r.Decisions()) != 0 {
		t.Fatal("a removed pool still has decisions")
	}
	if n := testutil.CollectAndCount(reg, "kvxds_replica_weight_multiplier"); n != 0 {
		t.Errorf("weight series after removal = %d, want 0", n)
	}
	n := hits.Load()
	time.Sleep(200 * time.Millisecond)
	if hits.Load() != n {
		t.Error("a removed pool is still scraped")
	}

	// Invalid settings are refused, not run.
	bad := spec
	bad.Profile = nil
	r.Set(ctx, map[string]PoolScrape{"chat": bad})
	if len(r.Decisions()) != 0 {
		t.Error("a pool without a profile runs")
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The runner hands each target's weight domain to Step: with relative
// weights, a busy replica alone in its domain sits at its own mean
// instead of dragging the others' weights up.
func TestRunnerWeightDomains(t *testing.T) {
	page, err := os.ReadFile("testdata/pages/vllm_v1.txt")
	if err != nil {
		t.Fatal(err)
	}
	waiting := map[string]string{"/a": "1.0", "/b": "3.0", "/g": "6.0"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p := strings.Replace(string(page), "} 3.0\n", "} "+waiting[req.URL.Path]+"\n", 1)
		p = strings.Replace(p, "} 0.4375\n", "} 0.1\n", 1) // the queue binds
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, p)
	}))
	defer srv.Close()

	for _, tc := range []struct {
		name   string
		domain string
		want   map[string]uint32
	}{
		// Pressures 0.125 and 0.375 around 0.25; g alone at its mean.
		{"g in its own domain", "hot", map[string]uint32{"a": 4, "b": 2, "g": 3}},
		// Around 0.42: b lifted, g at the bottom.
		{"one domain", "", map[string]uint32{"a": 4, "b": 3, "g": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRunner(RunnerOptions{})
			defer r.Stop()
			cfg := DefaultConfig()
			cfg.Relative = true
			profile, _ := BuiltinProfile(EngineVLLM)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r.Set(ctx, map[string]PoolScrape{"chat": {
				Config: cfg, Profile: profile, Scrape: Scrape{Interval: 50 * time.Millisecond, Timeout: time.Second},
				Targets: []Target{
					{ID: "a", URL: srv.URL + "/a"},
					{ID: "b", URL: srv.URL + "/b"},
					{ID: "g", URL: srv.URL + "/g", Domain: tc.domain},
				},
			}})
			waitUntil(t, "decisions", func() bool { return len(r.Decisions()["chat"]) == 3 })
			for id, d := range r.Decisions()["chat"] {
				if d.Weight != tc.want[id] {
					t.Errorf("%s: weight %d, want %d", id, d.Weight, tc.want[id])
				}
			}
		})
	}
}

// lockedBuffer is a log sink tests read while scrapers write.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// trtllm-serve on loopback, as it answers today: JSON on /metrics,
// Prometheus on /prometheus/metrics, the latter with or without iteration
// stats. The log says which path to set, and which signals the page lacks
// while the others still drive the weights.
func TestRunnerSaysWhatTheEngineLacks(t *testing.T) {
	full, json := readPage(t, "trtllm_prometheus.txt"), readPage(t, "trtllm_metrics.json")
	// An older trtllm-serve: KV utilisation and hit rate, no queue.
	kvOnly := []byte("# HELP trtllm_kv_cache_utilization KV cache utilization\n# TYPE trtllm_kv_cache_utilization gauge\n" +
		"trtllm_kv_cache_utilization{engine_type=\"trtllm\",model_name=\"m\"} 0.5\n")
	tests := []struct {
		name     string
		prom     []byte
		path     string
		decision bool     // a decision follows from the page
		want     []string // in the log
		wantNot  []string
	}{
		{name: "the engine's default path", prom: full, path: MetricsPath(EngineTRTLLM), decision: true,
			wantNot: []string{"lack signals", "got JSON"}},
		{name: "/metrics is JSON", prom: full, path: "/metrics",
			want: []string{"metrics scrape failing", "got JSON", `\"/prometheus/metrics\"`}},
		{name: "no iteration stats", prom: readPage(t, "trtllm_prometheus_no_iter_stats.txt"), path: MetricsPath(EngineTRTLLM),
			want: []string{"missing_series", "enable_iter_perf_stats: true"}},
		{name: "KV alone", prom: kvOnly, path: MetricsPath(EngineTRTLLM), decision: true,
			want: []string{"lack signals", `missing="queue_depth, running"`, "enable_iter_perf_stats"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write(json)
			})
			mux.HandleFunc("/prometheus/metrics", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
				w.Write(tt.prom)
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()

			var logs lockedBuffer
			log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
			r := NewRunner(RunnerOptions{Logger: log})
			defer r.Stop()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r.Set(ctx, map[string]PoolScrape{"p": {
				Config:  DefaultConfig(),
				Profile: mustProfile(t, EngineTRTLLM),
				Scrape:  Scrape{Interval: 50 * time.Millisecond, Timeout: time.Second},
				Targets: []Target{{ID: "a", URL: srv.URL + tt.path}},
			}})
			waitUntil(t, "a scrape", func() bool {
				v := r.View()["p"].Replicas["a"]
				return !v.LastScrape.IsZero() && (!tt.decision || v.LastError == nil)
			})
			for _, w := range tt.want {
				waitUntil(t, "the log to say "+w, func() bool { return strings.Contains(logs.String(), w) })
			}
			time.Sleep(120 * time.Millisecond) // a few more cycles
			for _, w := range tt.wantNot {
				if strings.Contains(logs.String(), w) {
					t.Errorf("log says %q:\n%s", w, logs.String())
				}
			}
			if n := strings.Count(logs.String(), "lack signals"); n > 1 {
				t.Errorf("missing signals logged %d times, want once:\n%s", n, logs.String())
			}
		})
	}
}

// Between scrapes of a real vLLM page whose prefix-cache counters grow by
// 1,000 lookups and 800 hits, a replica's decision carries a hit rate of
// 12 sixteenths, and its gauge says so.
func TestRunnerCached(t *testing.T) {
	page, err := os.ReadFile("testdata/pages/vllm_v1.txt")
	if err != nil {
		t.Fatal(err)
	}
	const labels = `{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}`
	for _, s := range []string{"vllm:prefix_cache_queries_total" + labels + " 1.234567e+06", "vllm:prefix_cache_hits_total" + labels + " 987654.0"} {
		if !strings.Contains(string(page), s) {
			t.Fatalf("the page lacks %q", s)
		}
	}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		k := n.Add(1)
		p := strings.Replace(string(page), "vllm:prefix_cache_queries_total"+labels+" 1.234567e+06",
			"vllm:prefix_cache_queries_total"+labels+" "+strconv.FormatInt(1000*k, 10), 1)
		p = strings.Replace(p, "vllm:prefix_cache_hits_total"+labels+" 987654.0",
			"vllm:prefix_cache_hits_total"+labels+" "+strconv.FormatInt(800*k, 10), 1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, p)
	}))
	defer srv.Close()

	reg := prometheus.NewRegistry()
	r := NewRunner(RunnerOptions{Registerer: reg})
	defer r.Stop()
	profile, _ := BuiltinProfile(EngineVLLM)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Set(ctx, map[string]PoolScrape{"chat": {
		Config:  DefaultConfig(),
		Profile: profile,
		Scrape:  Scrape{Interval: 20 * time.Millisecond, Timeout: time.Second},
		Targets: []Target{{ID: "a", URL: srv.URL + "/metrics"}},
	}})
	waitUntil(t, "a hit rate of 12/16", func() bool { return r.Decisions()["chat"]["a"].Cached == 12 })
	if got := testutil.ToFloat64(r.metrics.cached.WithLabelValues("chat", "a")); got != 12 {
		t.Errorf("kvxds_replica_prefix_cached_sixteenths = %v, want 12", got)
	}
}
