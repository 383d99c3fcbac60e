package weights

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var fuzzContentTypes = []string{ctText, ctOM, ""}

// FuzzParseSignals checks, for any page, content type, built-in profile and
// model filter, that parsing never panics; that signals that come back are
// usable (finite and ≥ 0 where not NaN, fractions ≤ 1, TTFT buckets sorted
// and cumulative); and that ParseSignals, which parses only the lines the
// profile reads, agrees exactly with ParsePage + Extract whenever the
// latter succeeds.
func FuzzParseSignals(f *testing.F) {
	pages, err := filepath.Glob(filepath.Join("testdata", "pages", "*.txt"))
	if err != nil || len(pages) == 0 {
		f.Fatalf("no fixtures: %v", err)
	}
	engines := BuiltinEngines()
	for _, path := range pages {
		body, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		ct := uint8(0)
		if strings.HasSuffix(path, ".openmetrics.txt") {
			ct = 1
		}
		for e := range engines {
			f.Add(body, ct, uint8(e), false)
		}
		f.Add(body, ct, uint8(3), true) // vllm, model filter
	}
	// Small pages mutate faster than the engines' 10–80 KB ones.
	for _, s := range []struct {
		page string
		ct   uint8
	}{
		{exoticOpenMetrics, 1},
		{"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 1\n" +
			"# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{le=\"0.5\"} 1\n" +
			"vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\nvllm:time_to_first_token_seconds_sum 3\n" +
			"vllm:time_to_first_token_seconds_count 2\n", 0},
		{"# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total 3\nvllm:num_preemptions_created 1.7e9\n" +
			"vllm:kv_cache_usage_perc{engine=\"0\"} 0.5 1700000000000\n# EOF\n", 1},
		{"# TYPE q summary\nq_count 3\nq_sum 1\nsglang:num_queue_reqs{tp_rank=\"0\"} 2\nsglang:token_usage 1.0000000000000002\n", 0},
	} {
		f.Add([]byte(s.page), s.ct, uint8(0), false)
		f.Add([]byte(s.page), s.ct, uint8(3), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, ct, engine uint8, filterModel bool) {
		p := mustProfile(t, engines[int(engine)%len(engines)])
		contentType := fuzzContentTypes[int(ct)%len(fuzzContentTypes)]
		model := ""
		if filterModel {
			model = llamaName
		}
		got, err := ParseSignals(p, model, body, contentType)
		if err == nil {
			checkUsable(t, got)
		} else if KindOf(err) == FailOther {
			t.Fatalf("error without a kind: %v", err)
		}

		fams, perr := ParsePage(body, contentType)
		if perr != nil {
			return // ParseSignals may be more lenient (see its doc)
		}
		want, werr := Extract(p, model, fams)
		if werr != nil {
			if err == nil || KindOf(err) != KindOf(werr) {
				t.Fatalf("ParsePage+Extract: %v; ParseSignals: %v", werr, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("ParsePage+Extract succeeds, ParseSignals: %v", err)
		}
		if d := diffSignals(got, want); d != "" {
			t.Fatalf("ParseSignals differs from ParsePage+Extract:\n%s", d)
		}
	})
}

func checkUsable(t *testing.T, s Signals) {
	t.Helper()
	for _, f := range []struct {
		name     string
		v        float64
		fraction bool
	}{
		{"QueueDepth", s.QueueDepth, false},
		{"Running", s.Running, false},
		{"KVOccupancy", s.KVOccupancy, true},
		{"Preemptions", s.Preemptions, false},
		{"PrefixQueries", s.PrefixQueries, false},
		{"PrefixHits", s.PrefixHits, false},
		{"PrefixHitRate", s.PrefixHitRate, true},
	} {
		if math.IsNaN(f.v) {
			continue
		}
		if math.IsInf(f.v, 0) || f.v < 0 || (f.fraction && f.v > 1) {
			t.Fatalf("%s = %v", f.name, f.v)
		}
	}
	h := s.TTFT
	if h == nil {
		return
	}
	if !finiteNonNeg(h.Count) || !finiteNonNeg(h.Sum) {
		t.Fatalf("TTFT count %v, sum %v", h.Count, h.Sum)
	}
	for i, b := range h.Buckets {
		if math.IsNaN(b.UpperBound) || b.UpperBound < 0 || !finiteNonNeg(b.Count) {
			t.Fatalf("TTFT bucket %d: %+v", i, b)
		}
		if i > 0 && (b.UpperBound <= h.Buckets[i-1].UpperBound || b.Count < h.Buckets[i-1].Count) {
			t.Fatalf("TTFT buckets %d, %d: %+v, %+v", i-1, i, h.Buckets[i-1], b)
		}
	}
}

func finiteNonNeg(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }
