package weights

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

const (
	ctText    = "text/plain; version=0.0.4; charset=utf-8"
	ctText1   = "text/plain; version=1.0.0; charset=utf-8" // prometheus_client ≥ 0.21
	ctOM      = "application/openmetrics-text; version=1.0.0; charset=utf-8"
	llamaName = "meta-llama/Llama-3.1-8B-Instruct"
	qwenName  = "Qwen/Qwen2.5-7B-Instruct"
)

// Bucket layouts and observations of the fixtures, as in testdata/pages/gen/gen.py.
var (
	ttftV1Bounds = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
		20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	ttftV0Bounds  = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	ttftSGLBounds = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}

	obsLlamaE0 = []obs{{0.0078125, 2}, {0.03125, 5}, {0.0625, 10}, {0.125, 20}, {0.375, 8}, {0.75, 4}, {1.5, 2}, {3.0, 1}}
	obsLlamaE1 = []obs{{0.0625, 4}, {0.125, 10}, {0.5, 5}, {12.0, 1}}
	obsQwenE0  = []obs{{0.03125, 3}, {0.25, 3}}
)

type obs struct {
	v float64
	n int
}

// hist is the histogram a Python prometheus_client Histogram with these
// bounds renders after the observations (le is inclusive; +Inf appended).
func hist(bounds []float64, o ...[]obs) *Histogram {
	h := &Histogram{}
	for _, b := range append(slices.Clone(bounds), math.Inf(1)) {
		var c float64
		for _, l := range o {
			for _, x := range l {
				if x.v <= b {
					c += float64(x.n)
				}
			}
		}
		h.Buckets = append(h.Buckets, Bucket{UpperBound: b, Count: c})
	}
	for _, l := range o {
		for _, x := range l {
			h.Count += float64(x.n)
			h.Sum += x.v * float64(x.n)
		}
	}
	return h
}

var nan = math.NaN()

func sig(queue, running, kv, preempt, queries, hits, hitRate float64, ttft *Histogram) Signals {
	return Signals{QueueDepth: queue, Running: running, KVOccupancy: kv, Preemptions: preempt,
		PrefixQueries: queries, PrefixHits: hits, PrefixHitRate: hitRate, TTFT: ttft}
}

var (
	wantVLLMv1    = sig(3, 12, 0.4375, 7, 1234567, 987654, nan, hist(ttftV1Bounds, obsLlamaE0))
	wantVLLMQwen  = sig(1, 4, 0.125, 0, 4096, 1024, nan, hist(ttftV1Bounds, obsQwenE0))
	wantVLLMv0    = sig(2, 7, 0.91, 4, nan, nan, 0.375, hist(ttftV0Bounds, []obs{{0.0625, 6}, {0.25, 2}, {6.0, 1}, {12.5, 1}}))
	wantSGLangTTF = hist(ttftSGLBounds, []obs{{0.0625, 100}, {0.3125, 20}, {1.5, 5}})
	// Today's SGLang fixtures: one scheduler, and two DP ranks of which
	// the second is nearly full.
	wantSGLangNow   = sig(6, 24, 0.71875, 5, 5000000, 3125000, 0.5625, wantSGLangTTF)
	wantSGLangNowDP = sig(6, 24+16, 0.9375, 5+3, 5000000, 3125000, (0.5625+0.4375)/2, wantSGLangTTF)
	wantTRTTTFT     = hist(ttftV1Bounds, []obs{{0.046875, 700}, {0.1875, 100}, {1.25, 12}})
)

func readPage(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "pages", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustProfile(t testing.TB, engine string) *Profile {
	t.Helper()
	p, ok := BuiltinProfile(engine)
	if !ok {
		t.Fatalf("no built-in profile %q", engine)
	}
	return p
}

// sameFloat is equality where NaN equals NaN.
func sameFloat(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

func diffSignals(got, want Signals) string {
	var d []string
	for _, f := range []struct {
		name      string
		got, want float64
	}{
		{"QueueDepth", got.QueueDepth, want.QueueDepth},
		{"Running", got.Running, want.Running},
		{"KVOccupancy", got.KVOccupancy, want.KVOccupancy},
		{"Preemptions", got.Preemptions, want.Preemptions},
		{"PrefixQueries", got.PrefixQueries, want.PrefixQueries},
		{"PrefixHits", got.PrefixHits, want.PrefixHits},
		{"PrefixHitRate", got.PrefixHitRate, want.PrefixHitRate},
	} {
		if !sameFloat(f.got, f.want) {
			d = append(d, f.name+": got "+fmtBound(f.got)+", want "+fmtBound(f.want))
		}
	}
	if !reflect.DeepEqual(got.TTFT, want.TTFT) {
		d = append(d, "TTFT differs:\n got  "+fmtHist(got.TTFT)+"\n want "+fmtHist(want.TTFT))
	}
	return strings.Join(d, "\n")
}

func fmtHist(h *Histogram) string {
	if h == nil {
		return "nil"
	}
	var b strings.Builder
	b.WriteString("count=" + fmtBound(h.Count) + " sum=" + fmtBound(h.Sum) + " [")
	for _, x := range h.Buckets {
		b.WriteString(" " + fmtBound(x.UpperBound) + ":" + fmtBound(x.Count))
	}
	b.WriteString(" ]")
	return b.String()
}

func TestParseSignalsFixtures(t *testing.T) {
	tests := []struct {
		name    string
		page    string
		ct      string
		engine  string
		model   string
		want    Signals
		wantErr FailureKind // "" = success
	}{
		// vLLM V1, one engine, in every content type it may announce.
		{name: "vllm_v1", page: "vllm_v1.txt", ct: ctText, engine: "vllm", want: wantVLLMv1},
		{name: "vllm_v1/no content type", page: "vllm_v1.txt", engine: "vllm", want: wantVLLMv1},
		{name: "vllm_v1/text 1.0.0", page: "vllm_v1.txt", ct: ctText1, engine: "vllm", want: wantVLLMv1},
		{name: "vllm_v1/model", page: "vllm_v1.txt", ct: ctText, engine: "vllm", model: llamaName, want: wantVLLMv1},
		{name: "vllm_v1/other model", page: "vllm_v1.txt", ct: ctText, engine: "vllm", model: qwenName, wantErr: FailMissing},
		{name: "vllm_v1/openmetrics", page: "vllm_v1.openmetrics.txt", ct: ctOM, engine: "vllm", want: wantVLLMv1},
		{name: "vllm_v1/openmetrics no version", page: "vllm_v1.openmetrics.txt", ct: "application/openmetrics-text", engine: "vllm", want: wantVLLMv1},
		// An OpenMetrics page announced as text still reads right: the
		// text parser takes "# EOF" for a comment and _total for untyped.
		{name: "vllm_v1/openmetrics as text", page: "vllm_v1.openmetrics.txt", ct: ctText, engine: "vllm", want: wantVLLMv1},
		// Data-parallel engines: the busiest engine's queue and KV, counts
		// and counters summed, TTFT added.
		{name: "vllm_v1_two_engines", page: "vllm_v1_two_engines.txt", ct: ctText, engine: "vllm",
			want: sig(5, 12+9, 0.8125, 7+2, 1234567+2000000, 987654+500000, nan, hist(ttftV1Bounds, obsLlamaE0, obsLlamaE1))},
		// Two models on one page are two engines.
		{name: "vllm_v1_two_models/all", page: "vllm_v1_two_models.txt", ct: ctText, engine: "vllm",
			want: sig(3, 12+4, 0.4375, 7, 1234567+4096, 987654+1024, nan, hist(ttftV1Bounds, obsLlamaE0, obsQwenE0))},
		{name: "vllm_v1_two_models/llama", page: "vllm_v1_two_models.txt", ct: ctText, engine: "vllm", model: llamaName, want: wantVLLMv1},
		{name: "vllm_v1_two_models/qwen", page: "vllm_v1_two_models.txt", ct: ctText, engine: "vllm", model: qwenName, want: wantVLLMQwen},
		{name: "vllm_v1_two_models/absent model", page: "vllm_v1_two_models.txt", ct: ctText, engine: "vllm", model: "mistral", wantErr: FailMissing},
		// Fallbacks: ≤ 0.8 V1 names, V0 names.
		{name: "vllm_v1_early", page: "vllm_v1_early.txt", ct: ctText, engine: "vllm",
			want: sig(0, 10, 0.5, 0, 64000, 16000, nan, hist(ttftV1Bounds, []obs{{0.125, 3}}))},
		{name: "vllm_v0", page: "vllm_v0.txt", ct: ctText, engine: "vllm", want: wantVLLMv0},
		{name: "vllm_v0/no prefix caching", page: "vllm_v0_no_prefix_caching.txt", ct: ctText, engine: "vllm",
			want: sig(2, 7, 0.91, 4, nan, nan, nan, wantVLLMv0.TTFT)},
		// SGLang before its retraction counter (a gauge only), one
		// scheduler, then two DP attention ranks: the busiest rank's queue
		// and KV, running summed, hit rates averaged.
		{name: "sglang", page: "sglang.txt", ct: ctText, engine: "sglang",
			want: sig(6, 24, 0.71875, nan, 5000000, 3125000, 0.5625, wantSGLangTTF)},
		{name: "sglang/model", page: "sglang.txt", ct: ctText, engine: "sglang", model: llamaName,
			want: sig(6, 24, 0.71875, nan, 5000000, 3125000, 0.5625, wantSGLangTTF)},
		{name: "sglang_dp_attention", page: "sglang_dp_attention.txt", ct: ctText, engine: "sglang",
			want: sig(6, 24+16, 0.71875, nan, 5000000, 3125000, (0.5625+0.4375)/2, wantSGLangTTF)},
		// SGLang today: the priority="" total, not its split by priority;
		// every TP rank's copy of one scheduler counted once; retractions
		// as preemptions; tokens summed over is_streaming and cache_source.
		{name: "sglang_priority", page: "sglang_priority.txt", ct: ctText, engine: "sglang", want: wantSGLangNow},
		{name: "sglang_all_schedulers", page: "sglang_all_schedulers.txt", ct: ctText, engine: "sglang", want: wantSGLangNow},
		{name: "sglang_dp", page: "sglang_dp.txt", ct: ctText, engine: "sglang", want: wantSGLangNowDP},
		{name: "sglang_dp_priority_all_schedulers", page: "sglang_dp_priority_all_schedulers.txt", ct: ctText,
			engine: "sglang", want: wantSGLangNowDP},
		{name: "sglang_dp_priority_all_schedulers/model", page: "sglang_dp_priority_all_schedulers.txt", ct: ctText,
			engine: "sglang", model: llamaName, want: wantSGLangNowDP},
		// TGI: queue and batch only; a model filter keeps its unlabelled series.
		{name: "tgi", page: "tgi.txt", ct: ctText, engine: "tgi", want: sig(4, 16, nan, nan, nan, nan, nan, nil)},
		{name: "tgi/model", page: "tgi.txt", ct: ctText, engine: "tgi", model: llamaName, want: sig(4, 16, nan, nan, nan, nan, nan, nil)},
		// trtllm-serve before its prompt token counters: the hit rate
		// gauge; today: the counters (and model_name "undefined", which a
		// model filter keeps).
		{name: "trtllm", page: "trtllm.txt", ct: ctText, engine: "trtllm",
			want: sig(1, 8, 0.25, nan, nan, nan, 0.75, wantTRTTTFT)},
		{name: "trtllm_prometheus", page: "trtllm_prometheus.txt", ct: ctText, engine: "trtllm",
			want: sig(1, 8, 0.25, nan, 1600000, 1200000, 0.75, wantTRTTTFT)},
		{name: "trtllm_prometheus/model", page: "trtllm_prometheus.txt", ct: ctText, engine: "trtllm", model: llamaName,
			want: sig(1, 8, 0.25, nan, 1600000, 1200000, 0.75, wantTRTTTFT)},
		{name: "trtllm_prometheus_no_iter_stats", page: "trtllm_prometheus_no_iter_stats.txt", ct: ctText, engine: "trtllm",
			wantErr: FailMissing},
		{name: "trtllm_metrics.json", page: "trtllm_metrics.json", ct: "application/json", engine: "trtllm", wantErr: FailParse},
		{name: "trtllm_metrics.json/no content type", page: "trtllm_metrics.json", engine: "trtllm", wantErr: FailParse},
		// Wrong profile for the page.
		{name: "wrong_engine", page: "tgi.txt", ct: ctText, engine: "vllm", wantErr: FailMissing},
		{name: "wrong_engine/sglang as vllm", page: "sglang.txt", ct: ctText, engine: "vllm", wantErr: FailMissing},
		{name: "wrong_engine/vllm as trtllm", page: "vllm_v1.txt", ct: ctText, engine: "trtllm", wantErr: FailMissing},
		// Malformed pages.
		{name: "garbage", page: "garbage.txt", ct: ctText, engine: "vllm", wantErr: FailParse},
		{name: "garbage/openmetrics", page: "garbage.txt", ct: ctOM, engine: "vllm", wantErr: FailParse},
		{name: "truncated", page: "truncated.txt", ct: ctText, engine: "vllm", wantErr: FailParse},
		{name: "truncated openmetrics", page: "truncated.openmetrics.txt", ct: ctOM, engine: "vllm", wantErr: FailParse},
		{name: "text as openmetrics", page: "vllm_v1.txt", ct: ctOM, engine: "vllm", wantErr: FailParse},
		{name: "nan_kv", page: "nan_kv.txt", ct: ctText, engine: "vllm", wantErr: FailInvalid},
		{name: "inf_queue", page: "inf_queue.txt", ct: ctText, engine: "vllm", wantErr: FailInvalid},
		{name: "negative", page: "negative.txt", ct: ctText, engine: "vllm", wantErr: FailInvalid},
		{name: "kv_over_one", page: "kv_over_one.txt", ct: ctText, engine: "vllm", wantErr: FailInvalid},
		{name: "kv_rounding", page: "kv_rounding.txt", ct: ctText, engine: "vllm", want: sig(3, 12, 1, nan, nan, nan, nan, nil)},
		{name: "empty", page: "empty.txt", ct: ctText, engine: "vllm", wantErr: FailMissing},
		{name: "empty/openmetrics", page: "empty.txt", ct: ctOM, engine: "vllm", wantErr: FailParse},
		{name: "protobuf", page: "vllm_v1.txt", ct: "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited", engine: "vllm", wantErr: FailParse},
		{name: "openmetrics 2.0", page: "vllm_v1.openmetrics.txt", ct: "application/openmetrics-text; version=2.0.0", engine: "vllm", wantErr: FailParse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSignals(mustProfile(t, tt.engine), tt.model, readPage(t, tt.page), tt.ct)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("no error, want %s; signals %+v", tt.wantErr, got)
				}
				if k := KindOf(err); k != tt.wantErr {
					t.Fatalf("error kind %s (%v), want %s", k, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if d := diffSignals(got, tt.want); d != "" {
				t.Error(d)
			}
		})
	}
}

// The error messages name what was wrong, for the operator reading logs.
func TestExtractErrorMessages(t *testing.T) {
	tests := []struct {
		page, engine, model string
		want                []string
	}{
		{"tgi.txt", "vllm", "", []string{`profile "vllm"`, "vllm:num_requests_waiting", "vllm:num_requests_running",
			"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}},
		{"vllm_v1.txt", "vllm", "mistral", []string{`for model "mistral"`}},
		{"nan_kv.txt", "vllm", "", []string{`vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}`, "NaN"}},
		{"inf_queue.txt", "vllm", "", []string{"vllm:num_requests_waiting{", "+Inf"}},
		{"negative.txt", "vllm", "", []string{"vllm:num_requests_running{", "-1"}},
		{"kv_over_one.txt", "vllm", "", []string{"vllm:kv_cache_usage_perc{", "1.25", "above 1"}},
		// What to turn on, and where the Prometheus page is.
		{"trtllm_prometheus_no_iter_stats.txt", "trtllm", "", []string{"trtllm_num_requests_waiting", "enable_iter_perf_stats: true"}},
		{"trtllm_metrics.json", "trtllm", "", []string{"got JSON", "set path", `"/prometheus/metrics"`}},
		{"garbage.txt", "vllm", "", []string{"got HTML", "set path"}},
	}
	for _, tt := range tests {
		_, err := ParseSignals(mustProfile(t, tt.engine), tt.model, readPage(t, tt.page), ctText)
		if err == nil {
			t.Errorf("%s: no error", tt.page)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tt.page, err, w)
			}
		}
	}
}

// Extract cases on small hand-written pages: matching rules that the
// engines' pages do not exercise.
func TestExtractRules(t *testing.T) {
	gauge := func(name, labels, v string) string {
		return "# TYPE " + name + " gauge\n" + name + labels + " " + v + "\n"
	}
	one := func(name string) []Series { return []Series{{Name: name}} }
	tests := []struct {
		name    string
		profile Profile
		model   string
		page    string
		ct      string
		want    Signals
		wantErr FailureKind
	}{
		{
			name:    "counter family under its base name matches a _total series",
			profile: Profile{Running: one("r"), Preemptions: one("p_total")},
			page:    "# TYPE r gauge\nr 1\n# TYPE p counter\np_total 5\np_created 1.7e9\n# EOF\n",
			ct:      ctOM,
			want:    sig(nan, 1, nan, 5, nan, nan, nan, nil),
		},
		{
			name:    "untyped _total series (no TYPE line)",
			profile: Profile{Running: one("r"), Preemptions: one("p_total")},
			page:    "r 1\np_total{a=\"x\"} 5\np_total{a=\"y\"} 6\n",
			want:    sig(nan, 1, nan, 11, nan, nan, nan, nil),
		},
		{
			name:    "_created is never a value",
			profile: Profile{Running: one("r"), Preemptions: one("p_created")},
			page:    gauge("r", "", "1") + gauge("p_created", "", "1.7e9"),
			want:    sig(nan, 1, nan, nan, nan, nan, nan, nil),
		},
		{
			name:    "a gauge under the base name is no counter",
			profile: Profile{Running: one("r"), Preemptions: one("p_total")},
			page:    gauge("r", "", "1") + gauge("p", "", "3"),
			want:    sig(nan, 1, nan, nan, nan, nan, nan, nil),
		},
		{
			name: "series labels select; the first present alternative wins",
			profile: Profile{
				QueueDepth: []Series{{Name: "absent"}, {Name: "q", Labels: map[string]string{"kind": "waiting"}}, {Name: "q"}},
				Running:    []Series{{Name: "q", Labels: map[string]string{"kind": "nope"}}, {Name: "q", Labels: map[string]string{"kind": "running"}}},
			},
			page: "# TYPE q gauge\nq{kind=\"waiting\"} 2\nq{kind=\"running\"} 5\nq{kind=\"waiting\",dp=\"1\"} 3\n",
			want: sig(5, 5, nan, nan, nan, nan, nan, nil),
		},
		{
			name:    "scale: a percentage",
			profile: Profile{KVOccupancy: []Series{{Name: "kv_pct", Scale: 0.01}}},
			page:    gauge("kv_pct", "", "50"),
			want:    sig(nan, nan, 0.5, nan, nan, nan, nan, nil),
		},
		{
			name:    "scale: a percentage read as a fraction is over 1",
			profile: Profile{KVOccupancy: one("kv_pct")},
			page:    gauge("kv_pct", "", "50"),
			wantErr: FailInvalid,
		},
		{
			name:    "model filter keeps series without model_name",
			profile: Profile{Running: one("r")},
			model:   "m1",
			page:    "# TYPE r gauge\nr{model_name=\"m1\"} 1\nr{model_name=\"m2\"} 10\nr 100\n",
			want:    sig(nan, 101, nan, nan, nan, nan, nan, nil),
		},
		{
			name: "copies of one engine count once, its splits add up, engines combine per signal",
			profile: Profile{
				EngineLabel: "dp", CopyLabels: []string{"tp"},
				QueueDepth: one("q"), Running: one("r"), KVOccupancy: one("kv"), PrefixHits: one("h_total"),
			},
			page: "# TYPE q gauge\nq{dp=\"0\",tp=\"0\"} 3\nq{dp=\"0\",tp=\"1\"} 3\nq{dp=\"1\",tp=\"2\"} 5\nq{dp=\"1\",tp=\"3\"} 5\n" +
				"# TYPE r gauge\nr{dp=\"0\",tp=\"0\"} 4\nr{dp=\"0\",tp=\"1\"} 4\nr{dp=\"1\",tp=\"2\"} 2\n" +
				"# TYPE kv gauge\nkv{dp=\"0\"} 0.25\nkv{dp=\"1\"} 0.75\n" +
				"# TYPE h_total counter\nh_total{src=\"a\"} 1\nh_total{src=\"b\"} 2\n",
			want: sig(5, 6, 0.75, nan, nan, 3, nan, nil),
		},
		{
			name:    "an empty label wanted matches the series without it",
			profile: Profile{QueueDepth: []Series{{Name: "q", Labels: map[string]string{"priority": ""}}}},
			page: "# TYPE q gauge\nq{priority=\"\"} 6\nq{priority=\"0\"} 2\nq{priority=\"1\"} 4\n" +
				"# TYPE q2 gauge\n",
			want: sig(6, nan, nan, nan, nan, nan, nan, nil),
		},
		{
			name:    "an empty label wanted, on a page without it",
			profile: Profile{QueueDepth: []Series{{Name: "q", Labels: map[string]string{"priority": ""}}}},
			page:    "# TYPE q gauge\nq{tp_rank=\"0\"} 6\n",
			want:    sig(6, nan, nan, nan, nan, nan, nan, nil),
		},
		{
			name:    "the unnamed model passes a model filter",
			profile: Profile{UnnamedModel: "undefined", Running: one("r")},
			model:   "m1",
			page:    "# TYPE r gauge\nr{model_name=\"undefined\"} 2\nr{model_name=\"m2\"} 10\n",
			want:    sig(nan, 2, nan, nan, nan, nan, nan, nil),
		},
		{
			name:    "model filter falls through to the next alternative",
			profile: Profile{QueueDepth: []Series{{Name: "a"}, {Name: "b"}}},
			model:   "m1",
			page:    "# TYPE a gauge\na{model_name=\"m2\"} 1\n# TYPE b gauge\nb{model_name=\"m1\"} 2\n",
			want:    sig(2, nan, nan, nan, nan, nan, nan, nil),
		},
		{
			name:    "invalid values in series filtered out do not matter",
			profile: Profile{QueueDepth: one("q")},
			model:   "m1",
			page:    "# TYPE q gauge\nq{model_name=\"m1\"} 1\nq{model_name=\"m2\"} NaN\n",
			want:    sig(1, nan, nan, nan, nan, nan, nan, nil),
		},
		{
			name:    "a histogram is no scalar",
			profile: Profile{QueueDepth: one("h"), Running: one("r")},
			page:    "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n" + gauge("r", "", "2"),
			want:    sig(nan, 2, nan, nan, nan, nan, nan, nil),
		},
		{
			name:    "a gauge is no histogram",
			profile: Profile{Running: one("r"), TTFT: one("r")},
			page:    gauge("r", "", "2"),
			want:    sig(nan, 2, nan, nan, nan, nan, nan, nil),
		},
		{
			name:    "negative hit rate means not computed",
			profile: Profile{Running: one("r"), PrefixHitRate: one("hr")},
			page:    gauge("r", "", "2") + "# TYPE hr gauge\nhr{e=\"0\"} -1\nhr{e=\"1\"} 0.5\n",
			want:    sig(nan, 2, nan, nan, nan, nan, 0.5, nil),
		},
		{
			name:    "hit rate above 1",
			profile: Profile{Running: one("r"), PrefixHitRate: one("hr")},
			page:    gauge("r", "", "2") + gauge("hr", "", "1.5"),
			wantErr: FailInvalid,
		},
		{
			name:    "NaN counter",
			profile: Profile{Running: one("r"), PrefixHits: one("h_total")},
			page:    gauge("r", "", "2") + "# TYPE h_total counter\nh_total NaN\n",
			wantErr: FailInvalid,
		},
		{
			name:    "sum overflows",
			profile: Profile{Running: one("r")},
			page:    "# TYPE r gauge\nr{e=\"0\"} 1e308\nr{e=\"1\"} 1e308\n",
			wantErr: FailInvalid,
		},
		{
			name:    "histograms with different layouts add over common bounds, unsorted input",
			profile: Profile{Running: one("r"), TTFT: []Series{{Name: "t", Scale: 0.5}}},
			page: gauge("r", "", "1") + "# TYPE t histogram\n" +
				"t_bucket{e=\"0\",le=\"+Inf\"} 4\nt_bucket{e=\"0\",le=\"100\"} 3\nt_bucket{e=\"0\",le=\"10\"} 1\nt_sum{e=\"0\"} 250\nt_count{e=\"0\"} 4\n" +
				"t_bucket{e=\"1\",le=\"10\"} 2\nt_bucket{e=\"1\",le=\"50\"} 2\nt_bucket{e=\"1\",le=\"+Inf\"} 2\nt_sum{e=\"1\"} 10\nt_count{e=\"1\"} 2\n",
			want: sig(nan, 1, nan, nan, nan, nan, nan, &Histogram{Count: 6, Sum: 130,
				Buckets: []Bucket{{5, 3}, {math.Inf(1), 6}}}),
		},
		{
			name:    "histogram buckets not cumulative",
			profile: Profile{Running: one("r"), TTFT: one("t")},
			page:    gauge("r", "", "1") + "# TYPE t histogram\nt_bucket{le=\"1\"} 5\nt_bucket{le=\"2\"} 4\nt_bucket{le=\"+Inf\"} 5\nt_sum 3\nt_count 5\n",
			wantErr: FailInvalid,
		},
		{
			name:    "histogram bucket twice",
			profile: Profile{Running: one("r"), TTFT: one("t")},
			page:    gauge("r", "", "1") + "# TYPE t histogram\nt_bucket{le=\"1\"} 1\nt_bucket{le=\"1\"} 1\nt_sum 3\nt_count 1\n",
			wantErr: FailInvalid,
		},
		{
			// expfmt's text parser drops a bucket with le="NaN".
			name:    "histogram NaN bound",
			profile: Profile{Running: one("r"), TTFT: one("t")},
			page:    gauge("r", "", "1") + "# TYPE t histogram\nt_bucket{le=\"NaN\"} 1\nt_sum 3\nt_count 1\n",
			want:    sig(nan, 1, nan, nan, nan, nan, nan, &Histogram{Count: 1, Sum: 3}),
		},
		{
			name:    "histogram negative bound",
			profile: Profile{Running: one("r"), TTFT: one("t")},
			page:    gauge("r", "", "1") + "# TYPE t histogram\nt_bucket{le=\"-1\"} 0\nt_bucket{le=\"+Inf\"} 1\nt_sum 3\nt_count 1\n",
			wantErr: FailInvalid,
		},
		{
			name:    "histogram Inf sum",
			profile: Profile{Running: one("r"), TTFT: one("t")},
			page:    gauge("r", "", "1") + "# TYPE t histogram\nt_bucket{le=\"+Inf\"} 1\nt_sum +Inf\nt_count 1\n",
			wantErr: FailInvalid,
		},
		{
			name:    "no core signal configured",
			profile: Profile{Name: "custom", Preemptions: one("p_total")},
			page:    "p_total 1\n",
			wantErr: FailMissing,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSignals(&tt.profile, tt.model, []byte(tt.page), tt.ct)
			if tt.wantErr != "" {
				if k := KindOf(err); err == nil || k != tt.wantErr {
					t.Fatalf("error %v (kind %s), want kind %s", err, k, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if d := diffSignals(got, tt.want); d != "" {
				t.Error(d)
			}
		})
	}
}

// A decoder that names counter families without _total (expfmt before
// v0.73, or families built by hand) still feeds a _total series.
func TestExtractCounterBaseName(t *testing.T) {
	counter := dto.MetricType_COUNTER
	fams := map[string]*dto.MetricFamily{
		"p": {Name: proto.String("p"), Type: &counter, Metric: []*dto.Metric{{Counter: &dto.Counter{Value: proto.Float64(5)}}}},
		"r": {Name: proto.String("r"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: proto.Float64(1)}}}},
	}
	got, err := Extract(&Profile{Running: []Series{{Name: "r"}}, Preemptions: []Series{{Name: "p_total"}}}, "", fams)
	if err != nil || got.Preemptions != 5 || got.Running != 1 {
		t.Fatalf("Extract = %+v, %v; want Preemptions 5, Running 1", got, err)
	}
}

func TestExtractNilProfile(t *testing.T) {
	if _, err := Extract(nil, "", nil); err == nil {
		t.Fatal("no error for a nil profile")
	}
}

func TestParsePageCounterNames(t *testing.T) {
	// Both formats key a counter family by its _total name; the text format
	// has _created as a gauge family of its own, OpenMetrics folds it in.
	for _, tc := range []struct{ page, ct string }{{"vllm_v1.txt", ctText}, {"vllm_v1.openmetrics.txt", ctOM}} {
		fams, err := ParsePage(readPage(t, tc.page), tc.ct)
		if err != nil {
			t.Fatalf("%s: %v", tc.page, err)
		}
		if f := fams["vllm:num_preemptions_total"]; f == nil || f.GetType().String() != "COUNTER" {
			t.Errorf("%s: vllm:num_preemptions_total is %v", tc.page, f)
		}
		if _, ok := fams["vllm:num_preemptions"]; ok {
			t.Errorf("%s: a family under the base name", tc.page)
		}
	}
}

func TestBuiltinProfiles(t *testing.T) {
	if got, want := BuiltinEngines(), []string{"vllm", "sglang", "tgi", "trtllm"}; !slices.Equal(got, want) {
		t.Errorf("BuiltinEngines() = %v, want %v", got, want)
	}
	for _, e := range BuiltinEngines() {
		p := mustProfile(t, e)
		if p.Name != e {
			t.Errorf("profile %q has Name %q", e, p.Name)
		}
		if len(p.QueueDepth)+len(p.Running)+len(p.KVOccupancy) == 0 {
			t.Errorf("profile %q has no core signal", e)
		}
	}
	if _, ok := BuiltinProfile("ollama"); ok {
		t.Error("BuiltinProfile(ollama) found")
	}
	// Callers get copies.
	p := mustProfile(t, "vllm")
	p.QueueDepth[0].Name = "changed"
	p.KVOccupancy = nil
	if q := mustProfile(t, "vllm"); q.QueueDepth[0].Name != "vllm:num_requests_waiting" || len(q.KVOccupancy) != 2 {
		t.Errorf("modifying a returned profile changed the built-in: %+v", q)
	}
	c := (&Profile{QueueDepth: []Series{{Name: "q", Labels: map[string]string{"a": "b"}}}}).Clone()
	c2 := c.Clone()
	c2.QueueDepth[0].Labels["a"] = "x"
	if c.QueueDepth[0].Labels["a"] != "b" {
		t.Error("Clone shares label maps")
	}
}

// trtllm-serve's gauges carry the writing process's pid: a restarted
// server's page may still hold its predecessor's series, which must not
// add to its queue.
func TestExtractTRTLLMPidCopies(t *testing.T) {
	page := "# HELP trtllm_num_requests_waiting Number of queued requests\n# TYPE trtllm_num_requests_waiting gauge\n" +
		"trtllm_num_requests_waiting{engine_type=\"undefined\",model_name=\"undefined\",pid=\"4242\"} 3.0\n" +
		"trtllm_num_requests_waiting{engine_type=\"undefined\",model_name=\"undefined\",pid=\"4343\"} 1.0\n"
	got, err := ParseSignals(mustProfile(t, EngineTRTLLM), "", []byte(page), ctText)
	if err != nil {
		t.Fatal(err)
	}
	if got.QueueDepth != 3 {
		t.Errorf("queue = %v, want 3", got.QueueDepth)
	}
}
