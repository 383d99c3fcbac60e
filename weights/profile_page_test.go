package weights

import (
	"bytes"
	"errors"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ParseSignals parses only the lines the profile reads; on valid pages that
// must give exactly what ParsePage + Extract give.
func TestParseSignalsMatchesFullParse(t *testing.T) {
	pages := map[string]string{}
	for _, name := range []string{"vllm_v1.txt", "vllm_v1.openmetrics.txt", "vllm_v1_two_engines.txt",
		"vllm_v1_two_models.txt", "vllm_v1_early.txt", "vllm_v0.txt", "vllm_v0_no_prefix_caching.txt",
		"sglang.txt", "sglang_dp_attention.txt", "tgi.txt", "trtllm.txt", "kv_rounding.txt"} {
		pages[name] = string(readPage(t, name))
	}
	// Suffix games: a line named n belongs to family n, or to n less one
	// suffix if that family is a histogram or summary.
	pages["summary_count.txt"] = "# TYPE q summary\nq_count 3\nq_sum 1\nr 1\n"
	pages["count_before_summary.txt"] = "q_count 3\n# TYPE q summary\nq_count 4\nq_sum 1\nr 2\n"
	pages["histogram_total.txt"] = "# TYPE t_total histogram\nt_total_bucket{le=\"1\"} 1\nt_total_bucket{le=\"+Inf\"} 2\nt_total_sum 1\nt_total_count 2\nr 1\n"
	pages["bucket_bucket.txt"] = "# TYPE t histogram\nt_bucket_bucket{le=\"1\"} 1\nt_bucket{le=\"+Inf\"} 2\nt_count 2\nt_sum 3\nr 1\n"
	profiles := []*Profile{
		{Name: "suffixes", QueueDepth: []Series{{Name: "q_count"}}, Running: []Series{{Name: "r"}},
			Preemptions: []Series{{Name: "q_sum"}}, PrefixHits: []Series{{Name: "t_total"}},
			TTFT: []Series{{Name: "t_total"}, {Name: "t"}, {Name: "t_bucket"}}},
	}
	for _, e := range BuiltinEngines() {
		profiles = append(profiles, mustProfile(t, e))
	}
	names := make([]string, 0, len(pages))
	for n := range pages {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		ct := ctText
		if strings.HasSuffix(name, ".openmetrics.txt") {
			ct = ctOM
		}
		for _, p := range profiles {
			for _, model := range []string{"", llamaName, qwenName} {
				fams, err := ParsePage([]byte(pages[name]), ct)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				want, werr := Extract(p, model, fams)
				got, err := ParseSignals(p, model, []byte(pages[name]), ct)
				if KindOf(err) != KindOf(werr) || (err == nil) != (werr == nil) {
					t.Errorf("%s/%s/%q: ParseSignals error %v, ParsePage+Extract %v", name, p.Name, model, err, werr)
					continue
				}
				if d := diffSignals(got, want); d != "" {
					t.Errorf("%s/%s/%q:\n%s", name, p.Name, model, d)
				}
			}
		}
	}
}

// Malformed lines of families the profile does not read still fail the
// page: the filter leaves any line it cannot vouch for to the parser.
func TestParseSignalsRejectsMalformedUnrelatedLines(t *testing.T) {
	good := string(readPage(t, "nan_kv.txt"))
	good = strings.Replace(good, "NaN", "0.5", 1)
	p := mustProfile(t, "vllm")
	if _, err := ParseSignals(p, "", []byte(good), ctText); err != nil {
		t.Fatalf("base page: %v", err)
	}
	for _, bad := range []string{
		"other 1 2 3\n",
		"other{a=\"b\"} one\n",
		"other{a=\"b\" 1\n",
		"other{a=\"b\",a=\"c\"} 1\n",
		"other{__name__=\"x\"} 1\n",
		"other{a=\"\\q\"} 1\n",
		"other{a=\"\xff\"} 1\n",
		"other 1 \n",
		"other 0x1p3\n",
		"other 1 1.5\n",
		"other\n",
		"<html>\n",
		"# TYPE other gaug\n",
		"# TYPE other gauge \n",
		"# HELP other bad \\escape\n",
		"# HELP other@ x\n",
		"{\"other\"} 1 1 1\n",
		"other_bucket{le=\"x\"} 1\n",
		"other 1", // truncated: no final newline
	} {
		for _, page := range []string{bad + good, good + bad} {
			if strings.HasSuffix(bad, "\n") || strings.HasSuffix(page, bad) {
				fams, perr := ParsePage([]byte(page), ctText)
				_, err := ParseSignals(p, "", []byte(page), ctText)
				if perr == nil {
					// Some of these are fine for the TextParser in this
					// position; then ParseSignals must agree.
					if err != nil {
						t.Errorf("%q: ParsePage accepts (%d families), ParseSignals: %v", page, len(fams), err)
					}
					continue
				}
				if KindOf(err) != FailParse {
					t.Errorf("%q: ParsePage: %v; ParseSignals: %v, want a parse error", page, perr, err)
				}
			}
		}
	}
}

func TestParseTextLine(t *testing.T) {
	tests := []struct {
		line  string
		name  string
		clean bool
	}{
		{"", "", true},
		{"   \t", "", true},
		{"# a comment, anything \\q goes", "", true},
		{"#", "", true},
		{"# HELP", "", true},
		{"# HELP x", "", true},
		{"# HELP x ", "x", true},
		{"# HELP x some \\\\ \\n \\\" text", "x", true},
		{"# HELP x bad \\t", "", false},
		{"# HELP x trailing \\", "", false},
		{"# TYPE vllm:x counter", "vllm:x", true},
		{"# TYPE x Gauge_Histogram", "x", true},
		{"# TYPE x info", "", false},
		{"# TYPE \"x\" gauge", "", false},
		{"#TYPE x gauge", "x", true},
		{"x 1", "x", true},
		{"  x\t1", "x", true},
		{"x{} 1", "x", true},
		{"x {a=\"b\"} 1", "x", true},
		{"x{ a = \"b\" , } 1", "x", true},
		{"x{a=\"b\"}1", "x", true},
		{"x 1 1700000000000", "x", true},
		{"x NaN", "x", true},
		{"x -Inf", "x", true},
		{"x 1e-3", "x", true},
		{"x 1_000", "", false},
		{"x 1 17e3", "", false},
		{"x 1 1 ", "", false},
		{"x", "", false},
		{"x\"y\" 1", "", false},
		{"1x 1", "", false},
		{"x{a=\"b\"", "", false},
		{"x{a=\"b} 1", "", false},
		{"x{1a=\"b\"} 1", "", false},
		{"x{a:b=\"c\"} 1", "", false},
		{"x{le=\"+Inf\"} 1", "x", true},
		{"x{quantile=\"0.5x\"} 1", "", false},
		{"{\"x\"} 1", "", false},
		{"x\r", "", false},
	}
	for _, tt := range tests {
		name, clean := textLine([]byte(tt.line))
		if clean != tt.clean || clean && string(name) != tt.name {
			t.Errorf("textLine(%q) = %q, %v; want %q, %v", tt.line, name, clean, tt.name, tt.clean)
		}
	}
}

// exoticOpenMetrics exercises what the OpenMetrics→text rewrite handles:
// counters, _created, UNIT, exemplars, timestamps, gauge histograms,
// summaries, unknown, quoted names, escapes.
const exoticOpenMetrics = `# HELP vllm:num_preemptions Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions counter
# UNIT vllm:num_preemptions preemptions
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0 # {trace_id="abc"} 1.0 1751385600.5
vllm:num_preemptions_created{engine="0",model_name="m"} 1.751385600123456e+09
# TYPE vllm:num_requests_waiting gauge
# HELP vllm:num_requests_waiting Waiting \"quoted\" \\ and \n escaped.
vllm:num_requests_waiting{engine="0",model_name="m"} 3 1751385600.25
# TYPE lat_seconds histogram
# UNIT lat_seconds seconds
lat_seconds_bucket{le="0.5",path="a \"b\" # c"} 1 # {id="x"} 0.25
lat_seconds_bucket{le="+Inf",path="a \"b\" # c"} 2
lat_seconds_count{path="a \"b\" # c"} 2
lat_seconds_sum{path="a \"b\" # c"} 3.5
lat_seconds_created{path="a \"b\" # c"} 1751385600
# TYPE q gaugehistogram
q_bucket{le="1"} 2
q_bucket{le="+Inf"} 3
q_gcount 3
q_gsum 2
# TYPE s summary
s{quantile="0.5"} 0.25
s_sum 3
s_count 4
s_created 1751385600
# TYPE u unknown
u 5
# TYPE "my.counter" counter
{"my.counter_total",a="b"} 4
# EOF
`

// The rewrite reads OpenMetrics as expfmt's own OpenMetrics decoder does,
// for everything Extract looks at: family names and types, label sets,
// values, histogram buckets, counts and sums.
func TestParseOpenMetricsMatchesExpfmt(t *testing.T) {
	for _, tc := range []struct{ name, page string }{
		{"exotic", exoticOpenMetrics},
		{"vllm_v1.openmetrics.txt", string(readPage(t, "vllm_v1.openmetrics.txt"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.name != "exotic" {
				t.Skip("expfmt's OpenMetrics decoder takes ~1 s on a vLLM page")
			}
			want := decodeWithExpfmt(t, tc.page)
			got, err := ParsePage([]byte(tc.page), ctOM)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := familySummary(got), familySummary(want); g != w {
				t.Errorf("families differ:\n got:\n%s\nwant:\n%s", g, w)
			}
		})
	}
}

func decodeWithExpfmt(t *testing.T, page string) map[string]*dto.MetricFamily {
	t.Helper()
	dec := expfmt.NewDecoder(strings.NewReader(page), expfmt.FmtOpenMetrics_1_0_0.WithEscapingScheme(model.NoEscaping))
	fams := map[string]*dto.MetricFamily{}
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			return fams
		}
		if err != nil {
			t.Fatalf("expfmt: %v", err)
		}
		fams[mf.GetName()] = mf
	}
}

// familySummary renders what Extract can see of families, one line per
// series, sorted.
func familySummary(fams map[string]*dto.MetricFamily) string {
	var lines []string
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			l := name + " " + f.GetType().String() + " " + formatLabels(labels) + " ="
			if v, ok := scalarValue(f.GetType(), m); ok {
				l += " " + fmtBound(v)
			}
			if h := m.GetHistogram(); h != nil {
				hh, err := convertHistogram(name, m, 1)
				if err != nil {
					l += " " + err.Error()
				} else {
					l += " " + fmtHist(hh)
				}
			}
			if s := m.GetSummary(); s != nil {
				l += " count=" + fmtBound(float64(s.GetSampleCount())) + " sum=" + fmtBound(s.GetSampleSum())
				for _, q := range s.GetQuantile() {
					l += " q" + fmtBound(q.GetQuantile()) + "=" + fmtBound(q.GetValue())
				}
			}
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestParseOpenMetricsRewrite(t *testing.T) {
	fams, err := ParsePage([]byte(exoticOpenMetrics), ctOM)
	if err != nil {
		t.Fatal(err)
	}
	m := fams["vllm:num_requests_waiting"].GetMetric()[0]
	if m.GetTimestampMs() != 1751385600250 {
		t.Errorf("timestamp %d ms, want 1751385600250", m.GetTimestampMs())
	}
	if h := fams["vllm:num_requests_waiting"].GetHelp(); h != "Waiting \"quoted\" \\ and \n escaped." {
		t.Errorf("help %q", h)
	}
	if f := fams["vllm:num_preemptions_total"]; f.GetType() != dto.MetricType_COUNTER || f.GetHelp() == "" {
		t.Errorf("counter family: %v", f)
	}
	for _, n := range []string{"vllm:num_preemptions_created", "lat_seconds_created", "s_created", "vllm:num_preemptions"} {
		if _, ok := fams[n]; ok {
			t.Errorf("family %s present", n)
		}
	}
	// info and stateset (which expfmt's decoder rejects) read as Python's
	// text exposition renders them.
	info := "# TYPE build info\nbuild_info{version=\"1\"} 1\n# TYPE st stateset\nst{st=\"a\"} 1\n# EOF\n"
	fams, err = ParsePage([]byte(info), ctOM)
	if err != nil {
		t.Fatal(err)
	}
	if f := fams["build_info"]; f.GetType() != dto.MetricType_GAUGE {
		t.Errorf("info: %v", f)
	}
	if f := fams["st"]; f.GetType() != dto.MetricType_GAUGE {
		t.Errorf("stateset: %v", f)
	}
}

func TestParseOpenMetricsErrors(t *testing.T) {
	for _, page := range []string{
		"",
		"x 1\n",
		"x 1\n# EOF\nx 2\n",
		"x 1\n# EOF\n# EOF\n",
		"x 1\n#  EOF\n",
		"x 1# EOF\n",
		"# TYPE x gauge\n# TYPE x gauge\nx 1\n# EOF\n",
		"# HELP x a\n# HELP x b\nx 1\n# EOF\n",
		"# TYPE x bogus\nx 1\n# EOF\n",
		"<html></html>\n# EOF\n",
		"x 1 not-a-timestamp\n# EOF\n",
		"x{a=\"b} 1\n# EOF\n",
	} {
		if _, err := ParsePage([]byte(page), ctOM); KindOf(err) != FailParse {
			t.Errorf("ParsePage(%q) = %v, want a parse error", page, err)
		}
		if _, err := ParseSignals(mustProfile(t, "vllm"), "", []byte(page), ctOM); KindOf(err) != FailParse {
			t.Errorf("ParseSignals(%q) = %v, want a parse error", page, err)
		}
	}
	// "# EOF" without a final newline is fine.
	if _, err := ParsePage([]byte("x 1\n# EOF"), ctOM); err != nil {
		t.Errorf("no final newline: %v", err)
	}
}

func TestParseKeepSet(t *testing.T) {
	k := profileKeepSet(&Profile{QueueDepth: []Series{{Name: "a_count_sum"}}, Preemptions: []Series{{Name: "p_total"}}})
	for _, n := range []string{"a_count_sum", "a_count", "a", "a_count_sum_bucket", "a_count_sum_sum", "a_count_sum_count",
		"p_total", "p_total_count", "p", "p_bucket"} {
		if !k.has([]byte(n)) {
			t.Errorf("%s not kept", n)
		}
	}
	for _, n := range []string{"a_bucket", "a_sum", "p_created", "p_total_created", "_count"} {
		if k.has([]byte(n)) {
			t.Errorf("%s kept", n)
		}
	}
}

func TestParsePageFormat(t *testing.T) {
	for ct, want := range map[string]pageFormat{
		"":                          pageText,
		"text/plain":                pageText,
		"text/plain; version=0.0.4": pageText,
		"text/plain;version=1.0.0;charset=utf-8;escaping=allow-utf-8": pageText,
		"application/openmetrics-text":                                pageOpenMetrics,
		"application/openmetrics-text; version=0.0.1; charset=utf-8":  pageOpenMetrics,
		"Application/OpenMetrics-Text; version=1.0.0":                 pageOpenMetrics,
		"text/html; charset=utf-8":                                    pageText,
		";;;":                                                         pageText,
	} {
		if got, err := pageFormatOf(ct); err != nil || got != want {
			t.Errorf("pageFormatOf(%q) = %v, %v; want %v", ct, got, err, want)
		}
	}
	for _, ct := range []string{"application/openmetrics-text; version=2.0.0", "application/vnd.google.protobuf"} {
		if _, err := pageFormatOf(ct); err == nil {
			t.Errorf("pageFormatOf(%q) accepted", ct)
		}
	}
}

// A panic in the parser (none known) would be a parse error, not a crash;
// exercised through parseText's recover with a page that cannot panic, so
// just the happy path is checked here, and the fuzz test covers the rest.
func TestParseTextPooledParserIndependence(t *testing.T) {
	a, err := parseText([]byte("x 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseText([]byte("y 2\n")); err != nil {
		t.Fatal(err)
	}
	if len(a) != 1 || a["x"] == nil || math.Abs(a["x"].GetMetric()[0].GetUntyped().GetValue()-1) > 0 {
		t.Errorf("first result changed by the second parse: %v", a)
	}
	var buf bytes.Buffer
	if err := filterText([]byte("x 1"), keepSet{"x": {}}, &buf); !errors.Is(err, errUnclean) {
		t.Errorf("filterText on a truncated page: %v", err)
	}
}

// expfmt's TextParser takes quadratic time in the labels of one series;
// pages with absurd label sets fail fast instead.
func TestParseTooManyLabels(t *testing.T) {
	line := func(n int, prefix string) string {
		var b strings.Builder
		b.WriteString(prefix + "{")
		for i := range n {
			b.WriteString("l" + strconv.Itoa(i) + "=\"a=b\",")
		}
		b.WriteString("} 1\n")
		return b.String()
	}
	base := string(readPage(t, "vllm_v1.txt"))
	p := mustProfile(t, "vllm")
	for _, tc := range []struct {
		page string
		ok   bool
	}{
		{line(maxLabelsPerSeries, "other") + base, true},
		{line(maxLabelsPerSeries+1, "other") + base, false},
		{line(20000, "other") + base, false},
		{base + line(20000, "vllm:num_requests_waiting"), false},
		{"# HELP x " + strings.Repeat("a=b ", 1000) + "\n" + base, true},
	} {
		start := time.Now()
		_, err := ParseSignals(p, "", []byte(tc.page), ctText)
		_, perr := ParsePage([]byte(tc.page), ctText)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v", d)
		}
		if tc.ok != (err == nil) || tc.ok != (perr == nil) {
			t.Errorf("page of %d bytes: ParseSignals %v, ParsePage %v; want ok=%v", len(tc.page), err, perr, tc.ok)
		}
		if !tc.ok && (KindOf(err) != FailParse || KindOf(perr) != FailParse) {
			t.Errorf("kinds %s, %s; want parse", KindOf(err), KindOf(perr))
		}
	}
}
