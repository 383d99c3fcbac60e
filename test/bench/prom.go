package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvxds/kvxds/test/sim"
)

// EngineCounters is what the benchmark reads from one replica's /metrics
// page (or a sum over replicas, or a difference of two scrapes).
type EngineCounters struct {
	PrefixQueries float64 // vllm:prefix_cache_queries_total
	PrefixHits    float64 // vllm:prefix_cache_hits_total
	Preemptions   float64 // vllm:num_preemptions_total
	// LoRASwapIns is sim:lora_swap_ins_total: adapters loaded into a
	// slot (0 where the page has none).
	LoRASwapIns float64
	// LoRASlotWaits and LoRASlotWaitSeconds are sim:lora_slot_waits_total
	// and sim:lora_slot_wait_seconds_total: requests admitted after being
	// passed over for an adapter slot, and their waits.
	LoRASlotWaits, LoRASlotWaitSeconds float64
	// The prefill/decode counters of a decode replica (0 where the page
	// has none): requests prefilled on a prefill replica
	// (sim:pd_remote_prefills_total), prefilled locally without a prefill
	// replica named or after it failed (sim:pd_local_prefills_total by
	// reason), and prompt tokens whose KV was transferred.
	PDRemote, PDLocalNoHeader, PDLocalFailed, PDTransferred float64
	TTFT                                                    Histogram
}

// Histogram is a cumulative Prometheus histogram: Counts[i] observations
// at or below Bounds[i]; Count includes those above the last bound (+Inf).
type Histogram struct {
	Bounds []float64
	Counts []float64
	Count  float64
	Sum    float64
}

// HitRate is hits / queries (0 without queries).
func (c EngineCounters) HitRate() float64 {
	if c.PrefixQueries == 0 {
		return 0
	}
	return c.PrefixHits / c.PrefixQueries
}

// Add returns c + d (histograms merged bucket by bucket).
func (c EngineCounters) Add(d EngineCounters) EngineCounters {
	return EngineCounters{
		PrefixQueries:       c.PrefixQueries + d.PrefixQueries,
		PrefixHits:          c.PrefixHits + d.PrefixHits,
		Preemptions:         c.Preemptions + d.Preemptions,
		LoRASwapIns:         c.LoRASwapIns + d.LoRASwapIns,
		LoRASlotWaits:       c.LoRASlotWaits + d.LoRASlotWaits,
		LoRASlotWaitSeconds: c.LoRASlotWaitSeconds + d.LoRASlotWaitSeconds,
		PDRemote:            c.PDRemote + d.PDRemote,
		PDLocalNoHeader:     c.PDLocalNoHeader + d.PDLocalNoHeader,
		PDLocalFailed:       c.PDLocalFailed + d.PDLocalFailed,
		PDTransferred:       c.PDTransferred + d.PDTransferred,
		TTFT:                c.TTFT.merge(d.TTFT, 1),
	}
}

// Sub returns c − d: the increase since an earlier scrape d.
func (c EngineCounters) Sub(d EngineCounters) EngineCounters {
	return EngineCounters{
		PrefixQueries:       c.PrefixQueries - d.PrefixQueries,
		PrefixHits:          c.PrefixHits - d.PrefixHits,
		Preemptions:         c.Preemptions - d.Preemptions,
		LoRASwapIns:         c.LoRASwapIns - d.LoRASwapIns,
		LoRASlotWaits:       c.LoRASlotWaits - d.LoRASlotWaits,
		LoRASlotWaitSeconds: c.LoRASlotWaitSeconds - d.LoRASlotWaitSeconds,
		PDRemote:            c.PDRemote - d.PDRemote,
		PDLocalNoHeader:     c.PDLocalNoHeader - d.PDLocalNoHeader,
		PDLocalFailed:       c.PDLocalFailed - d.PDLocalFailed,
		PDTransferred:       c.PDTransferred - d.PDTransferred,
		TTFT:                c.TTFT.merge(d.TTFT, -1),
	}
}

// merge returns h + sign·o. Buckets are matched by upper bound; a bound
// only one side has is taken with the other side's count at the next lower
// bound (cumulative counts), which is exact when both use vLLM's buckets.
func (h Histogram) merge(o Histogram, sign float64) Histogram {
	bounds := slices.Concat(h.Bounds, o.Bounds)
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	out := Histogram{Bounds: bounds, Counts: make([]float64, len(bounds)),
		Count: h.Count + sign*o.Count, Sum: h.Sum + sign*o.Sum}
	for i, b := range bounds {
		out.Counts[i] = h.cumulativeAt(b) + sign*o.cumulativeAt(b)
	}
	return out
}

// cumulativeAt is the count of observations at or below bound b, as far
// as the buckets tell.
func (h Histogram) cumulativeAt(b float64) float64 {
	i := sort.SearchFloat64s(h.Bounds, b)
	if i < len(h.Bounds) && h.Bounds[i] == b {
		return h.Counts[i]
	}
	if i == 0 {
		return 0
	}
	return h.Counts[i-1]
}

// Quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: find the bucket holding rank q·Count and interpolate linearly
// inside it (from 0 for the first bucket); a rank in the +Inf bucket gives
// the highest finite bound. NaN without observations.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count <= 0 || len(h.Bounds) == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	q = min(max(q, 0), 1)
	rank := q * h.Count
	i := sort.Search(len(h.Counts), func(i int) bool { return h.Counts[i] >= rank })
	if i == len(h.Counts) {
		return h.Bounds[len(h.Bounds)-1]
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = h.Bounds[i-1], h.Counts[i-1]
	}
	hi := h.Bounds[i]
	in := h.Counts[i] - below
	if in <= 0 {
		return hi
	}
	return lo + (hi-lo)*(rank-below)/in
}

// httpClient is the client of the engines' /metrics pages and kvxds's
// /readyz.
func httpClient() *http.Client { return &http.Client{Timeout: 10 * time.Second} }

// ScrapeEngine fetches and parses one replica's /metrics page.
func ScrapeEngine(ctx context.Context, client *http.Client, addr string) (EngineCounters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return EngineCounters{}, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return EngineCounters{}, fmt.Errorf("scraping %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return EngineCounters{}, fmt.Errorf("scraping %s: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return EngineCounters{}, fmt.Errorf("parsing %s/metrics: %w", addr, err)
	}
	return engineCounters(fams)
}

func engineCounters(fams map[string]*dto.MetricFamily) (EngineCounters, error) {
	var c EngineCounters
	var err error
	counter := func(name string) float64 {
		f, ok := fams[name]
		if !ok {
			if err == nil {
				err = fmt.Errorf("metric %s missing", name)
			}
			return 0
		}
		v := 0.0
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				v += m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				v += m.GetUntyped().GetValue()
			}
		}
		return v
	}
	// The text parser names counter families without _total; accept both.
	pick := func(name string) float64 {
		if _, ok := fams[name]; ok {
			return counter(name)
		}
		if n := trimTotal(name); n != name {
			if _, ok := fams[n]; ok {
				return counter(n)
			}
		}
		return counter(name)
	}
	c.PrefixQueries = pick(sim.MetricPrefixQueries)
	c.PrefixHits = pick(sim.MetricPrefixHits)
	c.Preemptions = pick(sim.MetricPreemptions)
	// The simulator's own counters: optional, a vLLM page has none.
	optional := func(name, reason string) float64 {
		f := fams[name]
		if f == nil {
			f = fams[trimTotal(name)]
		}
		v := 0.0
		for _, m := range f.GetMetric() {
			if reason != "" && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == "reason" && l.GetValue() == reason
			}) {
				continue
			}
			v += m.GetCounter().GetValue() + m.GetUntyped().GetValue()
		}
		return v
	}
	c.LoRASwapIns = optional(sim.MetricLoRASwapIns, "")
	c.LoRASlotWaits = optional(sim.MetricLoRASlotWaits, "")
	c.LoRASlotWaitSeconds = optional(sim.MetricLoRASlotWaitSeconds, "")
	c.PDRemote = optional(sim.MetricPDRemotePrefills, "")
	c.PDLocalNoHeader = optional(sim.MetricPDLocalPrefills, "no_header")
	c.PDLocalFailed = optional(sim.MetricPDLocalPrefills, "failed")
	c.PDTransferred = optional(sim.MetricPDTransferredTokens, "")
	f, ok := fams[sim.MetricTTFT]
	if !ok {
		if err == nil {
			err = fmt.Errorf("metric %s missing", sim.MetricTTFT)
		}
		return c, err
	}
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		one := Histogram{Count: float64(h.GetSampleCount()), Sum: h.GetSampleSum()}
		for _, b := range h.GetBucket() {
			if math.IsInf(b.GetUpperBound(), 1) {
				continue
			}
			one.Bounds = append(one.Bounds, b.GetUpperBound())
			one.Counts = append(one.Counts, float64(b.GetCumulativeCount()))
		}
		c.TTFT = c.TTFT.merge(one, 1)
	}
	return c, err
}

func trimTotal(name string) string {
	const suffix = "_total"
	if len(name) > len(suffix) && name[len(name)-len(suffix):] == suffix {
		return name[:len(name)-len(suffix)]
	}
	return name
}

// LoRAInfo reads vllm:lora_requests_info from a parsed /metrics page as
// llm-d's metrics extractor does: of its series, the one with the newest
// value (a Unix time) wins; its running_lora_adapters and
// waiting_lora_adapters labels are comma-separated adapter names, and
// max_lora the slots. ok is false when the page has no series.
func LoRAInfo(fams map[string]*dto.MetricFamily) (s LoRAState, ok bool, err error) {
	f := fams[sim.MetricLoRAInfo]
	if f == nil {
		return s, false, nil
	}
	var newest *dto.Metric
	for _, m := range f.GetMetric() {
		if newest == nil || m.GetGauge().GetValue() > newest.GetGauge().GetValue() {
			newest = m
		}
	}
	if newest == nil {
		return s, false, nil
	}
	split := func(v string) []string {
		if v == "" {
			return nil
		}
		return strings.Split(v, ",")
	}
	for _, l := range newest.GetLabel() {
		switch l.GetName() {
		case "running_lora_adapters":
			s.Running = split(l.GetValue())
		case "waiting_lora_adapters":
			s.Waiting = split(l.GetValue())
		case "max_lora":
			if s.MaxLoRA, err = strconv.Atoi(l.GetValue()); err != nil {
				return s, false, fmt.Errorf("%s: max_lora %q: %w", sim.MetricLoRAInfo, l.GetValue(), err)
			}
		}
	}
	return s, true, nil
}
