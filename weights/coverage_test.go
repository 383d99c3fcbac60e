package weights

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Which signals real pages carry for each profile, and which a profile
// then lacks: the hit rate's two sources stand in for each other.
func TestCoverageOfRecordedPages(t *testing.T) {
	for _, tc := range []struct {
		engine, page string
		lacks        []string
	}{
		{EngineVLLM, "vllm_v1.txt", nil},
		{EngineVLLM, "vllm_v0.txt", nil},
		// Older SGLang exports retractions only as a gauge of the last
		// step, which the profile does not read as a counter.
		{EngineSGLang, "sglang.txt", []string{SignalPreemptions}},
		{EngineSGLang, "sglang_priority.txt", nil},
		{EngineTGI, "tgi.txt", nil},
	} {
		t.Run(tc.engine+"/"+tc.page, func(t *testing.T) {
			p, _ := BuiltinProfile(tc.engine)
			body, err := os.ReadFile("testdata/pages/" + tc.page)
			if err != nil {
				t.Fatal(err)
			}
			s, err := ParseSignals(p, "", body, "")
			if err != nil {
				t.Fatal(err)
			}
			found := s.Carried()
			if got := p.Lacks(found).Names(); !slices.Equal(got, tc.lacks) {
				t.Errorf("lacks %v, want %v (carried %v)", got, tc.lacks, found.Names())
			}
			if found&^p.Reads() != 0 {
				t.Errorf("carried %v beyond what the profile reads %v", found.Names(), p.Reads().Names())
			}
		})
	}
	// A TGI page read as vLLM carries none of vLLM's signals.
	p, _ := BuiltinProfile(EngineVLLM)
	body, _ := os.ReadFile("testdata/pages/tgi.txt")
	if _, err := ParseSignals(p, "", body, ""); KindOf(err) != FailMissing {
		t.Errorf("TGI page read as vLLM: %v, want missing_series", err)
	}
	if got, want := p.Lacks(0), p.Reads()&^signalBit(SignalPrefixHitRate); got != want {
		t.Errorf("a page with nothing lacks %v, want %v", got.Names(), want.Names())
	}
	rateOnly, err := CustomProfile("custom", map[string]Series{
		SignalKVOccupancy: {Name: "kv"}, SignalPrefixHitRate: {Name: "hit_rate"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := rateOnly.Lacks(0); !got.Has(SignalPrefixHitRate) {
		t.Errorf("a page with nothing lacks %v of a profile reading only the hit rate gauge, not that", got.Names())
	}

	// The same vLLM page without its KV gauge (an engine that does not
	// export it under these names) lacks exactly that.
	body, _ = os.ReadFile("testdata/pages/vllm_v1.txt")
	var kept []string
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.Contains(l, "kv_cache_usage_perc") {
			kept = append(kept, l)
		}
	}
	s, err := ParseSignals(p, "", []byte(strings.Join(kept, "\n")), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Lacks(s.Carried()).Names(); !slices.Equal(got, []string{SignalKVOccupancy}) {
		t.Errorf("page without KV lacks %v", got)
	}
}

// The runner's view says what each replica's latest page carried: a
// vLLM page everything, a TGI page scraped as vLLM nothing, and a
// replica that never answered has no page read.
func TestRunnerCarried(t *testing.T) {
	serve := func(page string) string {
		body, err := os.ReadFile("testdata/pages/" + page)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			w.Write(body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL + "/metrics"
	}
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL + "/metrics"
	down.Close()

	r := NewRunner(RunnerOptions{})
	defer r.Stop()
	profile, _ := BuiltinProfile(EngineVLLM)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Set(ctx, map[string]PoolScrape{"chat": {
		Config: DefaultConfig(), Profile: profile,
		Scrape: Scrape{Interval: 50 * time.Millisecond, Timeout: time.Second},
		Targets: []Target{
			{ID: "vllm", URL: serve("vllm_v1.txt")},
			{ID: "tgi", URL: serve("tgi.txt")},
			{ID: "down", URL: downURL},
		},
	}})
	waitUntil(t, "pages read", func() bool {
		v := r.View()["chat"]
		return !v.Replicas["vllm"].PageRead.IsZero() && !v.Replicas["tgi"].PageRead.IsZero()
	})
	v := r.View()["chat"]
	if got := v.Replicas["vllm"].Carried; profile.Lacks(got) != 0 {
		t.Errorf("vLLM page lacks %v", profile.Lacks(got).Names())
	}
	if got := v.Replicas["tgi"].Carried; got != 0 {
		t.Errorf("TGI page read as vLLM carried %v", got.Names())
	}
	if d := v.Replicas["down"]; !d.PageRead.IsZero() || d.LastScrape.IsZero() {
		t.Errorf("unreachable replica: page read %v, last scrape %v", d.PageRead, d.LastScrape)
	}
}
