package weights

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// fractionSlack is how far above 1 a fraction may read before it is
// invalid: engines compute usage as used/total in floating point, so
// 1.0000000000000002 happens. Such values are clamped to 1.
const fractionSlack = 1e-9

// modelLabel is the label vLLM, SGLang and TensorRT-LLM put the served
// model's name in.
const modelLabel = "model_name"

// aggregation says how the engines on one page combine into the
// replica's value of a signal. Several data-parallel engines behind one
// server (vLLM's engine label, SGLang's dp_rank) each hold their own
// queue and KV cache, and the server spreads requests over them without
// regard to prefixes; several models on one page are separate engines
// too.
type aggregation int

const (
	// aggSum is for counts of work and counters (running requests,
	// preemptions, prefix lookups and hits): the replica's total.
	aggSum aggregation = iota
	// aggMax is for saturation (queue depth, KV occupancy): one full
	// engine queues and preempts its share of the replica's requests
	// however idle the others are, so the replica is as saturated as its
	// busiest engine, and max_queue_depth and max_kv_occupancy hold per
	// engine. A sum would halve max_queue_depth in effect with two
	// engines, a mean would average a saturated engine away.
	aggMax
	// aggMean is for an engine's own hit rate: the mean over engines.
	aggMean
)

func nanSignals() Signals {
	nan := math.NaN()
	return Signals{QueueDepth: nan, Running: nan, KVOccupancy: nan, Preemptions: nan,
		PrefixQueries: nan, PrefixHits: nan, PrefixHitRate: nan}
}

// Extract applies a profile to parsed metric families.
//
// model, if non-empty, keeps only series whose model_name label equals it;
// series without a model_name label (or with the profile's UnnamedModel)
// are kept. When several series of the chosen alternative match, copies
// (series differing only in the profile's CopyLabels, SGLang's ranks)
// count once and the rest of one engine add up; engines (the profile's
// EngineLabel, and models) then combine per signal: queue depth and KV
// occupancy are the busiest engine's, running requests and counters the
// sum, an engine's own hit rate the mean. TTFT histograms are added bucket
// by bucket over the bounds they share.
//
// A signal with no alternative present is NaN (TTFT nil). If none of
// QueueDepth, Running and KVOccupancy is present, the error is a
// *ScrapeError of kind FailMissing naming what was looked for. A NaN, ±Inf
// or negative value in a chosen series (a histogram's count, sum, bucket
// counts or bounds included), a fraction above 1 (up to 1+1e-9 is float
// error, read as 1), or a histogram whose buckets are not cumulative is a
// *ScrapeError of kind FailInvalid naming the series. One exception: a negative PrefixHitRate is vLLM V0's
// "prefix caching disabled" (-1), and such series count as absent.
func Extract(p *Profile, model string, families map[string]*dto.MetricFamily) (Signals, error) {
	out := nanSignals()
	if p == nil {
		return out, errors.New("weights: Extract with a nil profile")
	}
	x := extractor{fams: families, model: model, p: p}
	scalars := []struct {
		dst      *float64
		alts     []Series
		agg      aggregation
		fraction bool
		hitRate  bool
	}{
		{&out.QueueDepth, p.QueueDepth, aggMax, false, false},
		{&out.Running, p.Running, aggSum, false, false},
		{&out.KVOccupancy, p.KVOccupancy, aggMax, true, false},
		{&out.Preemptions, p.Preemptions, aggSum, false, false},
		{&out.PrefixQueries, p.PrefixQueries, aggSum, false, false},
		{&out.PrefixHits, p.PrefixHits, aggSum, false, false},
		{&out.PrefixHitRate, p.PrefixHitRate, aggMean, true, true},
	}
	for _, sc := range scalars {
		v, err := x.scalar(sc.alts, sc.agg, sc.fraction, sc.hitRate)
		if err != nil {
			return nanSignals(), err
		}
		*sc.dst = v
	}
	h, err := x.histogram(p.TTFT)
	if err != nil {
		return nanSignals(), err
	}
	out.TTFT = h
	out.Adapters = x.adapters(p.LoRAInfo)

	if math.IsNaN(out.QueueDepth) && math.IsNaN(out.Running) && math.IsNaN(out.KVOccupancy) {
		var names []string
		for _, l := range [][]Series{p.QueueDepth, p.Running, p.KVOccupancy} {
			for _, s := range l {
				names = append(names, s.String())
			}
		}
		what := "no queue, running or KV series configured"
		if len(names) > 0 {
			what = "none of " + strings.Join(names, ", ") + " found"
		}
		if model != "" {
			what += fmt.Sprintf(" for model %q", model)
		}
		if p.Hint != "" {
			what += " (" + p.Hint + ")"
		}
		return nanSignals(), &ScrapeError{Kind: FailMissing, Err: fmt.Errorf("profile %q: %s", p.Name, what)}
	}
	return out, nil
}

// String renders the series as a selector, for messages.
func (s Series) String() string {
	if len(s.Labels) == 0 {
		return s.Name
	}
	return s.Name + formatLabels(s.Labels)
}

func formatLabels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(m[k]))
	}
	b.WriteByte('}')
	return b.String()
}

// metricString renders one parsed series, name{labels}, for messages.
func metricString(name string, m *dto.Metric, extra ...string) string {
	labels := make(map[string]string, len(m.GetLabel())+len(extra)/2)
	for _, lp := range m.GetLabel() {
		labels[lp.GetName()] = lp.GetValue()
	}
	for i := 0; i+1 < len(extra); i += 2 {
		labels[extra[i]] = extra[i+1]
	}
	if len(labels) == 0 {
		return name
	}
	return name + formatLabels(labels)
}

func invalid(format string, args ...any) error {
	return &ScrapeError{Kind: FailInvalid, Err: fmt.Errorf(format, args...)}
}

type extractor struct {
	fams  map[string]*dto.MetricFamily
	model string
	p     *Profile
	// groups is scratch space for scalar.
	groups map[string]*seriesGroup
}

// seriesGroup is one engine's value of a signal while scalar folds a
// family's series.
type seriesGroup struct {
	engine string
	value  float64
}

// family finds the family a series names. A name ending in "_total" falls
// back to a counter family under the base name; "_created" names never
// match.
func (x *extractor) family(name string) *dto.MetricFamily {
	if strings.HasSuffix(name, "_created") {
		return nil
	}
	if f := x.fams[name]; f != nil {
		return f
	}
	if base, ok := strings.CutSuffix(name, "_total"); ok {
		if f := x.fams[base]; f != nil && f.GetType() == dto.MetricType_COUNTER {
			return f
		}
	}
	return nil
}

// matches applies the series' label filter and the model filter. A label
// wanted empty also matches a series without it, as in Prometheus, where
// an empty label is no label.
func (x *extractor) matches(s *Series, m *dto.Metric) bool {
	if m == nil {
		return false
	}
	for k, want := range s.Labels {
		if got, _ := labelValue(m, k); got != want {
			return false
		}
	}
	if x.model != "" {
		if got, ok := labelValue(m, modelLabel); ok && got != x.model && (x.p.UnnamedModel == "" || got != x.p.UnnamedModel) {
			return false
		}
	}
	return true
}

// groupKeys returns the keys under which scalar folds a series: copyKey
// is its labels without the profile's copy labels (series alike but for
// those repeat one state), engine its model and engine label.
func (x *extractor) groupKeys(m *dto.Metric) (copyKey, engine string) {
	var b strings.Builder
	for _, lp := range m.GetLabel() {
		if slices.Contains(x.p.CopyLabels, lp.GetName()) {
			continue
		}
		b.WriteString(lp.GetName())
		b.WriteByte('=')
		b.WriteString(strconv.Quote(lp.GetValue()))
		b.WriteByte(',')
	}
	model, _ := labelValue(m, modelLabel)
	engine = strconv.Quote(model)
	if x.p.EngineLabel != "" {
		e, _ := labelValue(m, x.p.EngineLabel)
		engine += "," + strconv.Quote(e)
	}
	return b.String(), engine
}

func labelValue(m *dto.Metric, name string) (string, bool) {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue(), true
		}
	}
	return "", false
}

func scaleOf(s *Series) float64 {
	if s.Scale == 0 {
		return 1
	}
	return s.Scale
}

// scalarValue is the value of a counter, gauge or untyped sample; ok is
// false for other types.
func scalarValue(t dto.MetricType, m *dto.Metric) (float64, bool) {
	switch t {
	case dto.MetricType_COUNTER:
		if m.Counter != nil {
			return m.Counter.GetValue(), true
		}
	case dto.MetricType_GAUGE:
		if m.Gauge != nil {
			return m.Gauge.GetValue(), true
		}
	case dto.MetricType_UNTYPED:
		if m.Untyped != nil {
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// scalar evaluates the first present alternative. Its series fold in
// three steps: series that differ only in the profile's copy labels are
// one (their maximum); the series of one engine (same model and engine
// label) add up, as they split its value by some other label (SGLang's
// is_streaming, cache_source); engines combine by agg. hitRate enables the
// negative-means-absent rule of PrefixHitRate.
func (x *extractor) scalar(alts []Series, agg aggregation, fraction, hitRate bool) (float64, error) {
	for i := range alts {
		s := &alts[i]
		f := x.family(s.Name)
		if f == nil {
			continue
		}
		scale := scaleOf(s)
		if x.groups == nil {
			x.groups = map[string]*seriesGroup{}
		}
		clear(x.groups)
		for _, m := range f.GetMetric() {
			if !x.matches(s, m) {
				continue
			}
			v, ok := scalarValue(f.GetType(), m)
			if !ok {
				continue
			}
			v *= scale
			if hitRate && v < 0 {
				continue // vLLM V0: -1 = prefix caching disabled
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return 0, invalid("%s = %v", metricString(f.GetName(), m), v)
			}
			if fraction && v > 1 {
				if v > 1+fractionSlack {
					return 0, invalid("%s = %v: a fraction above 1", metricString(f.GetName(), m), v)
				}
				v = 1
			}
			ck, ek := x.groupKeys(m)
			if g := x.groups[ck]; g != nil {
				g.value = max(g.value, v)
			} else {
				x.groups[ck] = &seriesGroup{engine: ek, value: v}
			}
		}
		if len(x.groups) == 0 {
			continue
		}
		engines := make(map[string]float64, 1)
		for _, g := range x.groups {
			engines[g.engine] += g.value
		}
		var out float64
		for _, v := range engines {
			switch agg {
			case aggMax:
				out = max(out, v)
			default:
				out += v
			}
		}
		if math.IsInf(out, 0) {
			return 0, invalid("sum of %s overflows", s)
		}
		switch {
		case agg == aggMean:
			out /= float64(len(engines))
		case !fraction:
			return out, nil
		}
		// A fraction split over an engine's series (none known) must not
		// pass 1.
		return min(out, 1), nil
	}
	return math.NaN(), nil
}

// histogram evaluates the first present histogram alternative; several
// matching series are added over the bucket bounds all of them have, which
// keeps the result exact (identical layouts, the usual case, lose nothing).
func (x *extractor) histogram(alts []Series) (*Histogram, error) {
	for i := range alts {
		s := &alts[i]
		f := x.family(s.Name)
		if f == nil {
			continue
		}
		if t := f.GetType(); t != dto.MetricType_HISTOGRAM && t != dto.MetricType_GAUGE_HISTOGRAM {
			continue
		}
		scale := scaleOf(s)
		var out *Histogram
		for _, m := range f.GetMetric() {
			if m.GetHistogram() == nil || !x.matches(s, m) {
				continue
			}
			h, err := convertHistogram(f.GetName(), m, scale)
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = h
				continue
			}
			if out = mergeHistograms(out, h); out == nil {
				return nil, invalid("sum of %s overflows", s)
			}
		}
		if out != nil {
			return out, nil
		}
	}
	return nil, nil
}

func convertHistogram(name string, m *dto.Metric, scale float64) (*Histogram, error) {
	dh := m.GetHistogram()
	count := float64(dh.GetSampleCount())
	if dh.SampleCountFloat != nil {
		count = dh.GetSampleCountFloat()
	}
	sum := dh.GetSampleSum() * scale
	if bad(count) {
		return nil, invalid("%s = %v", metricString(name+"_count", m), count)
	}
	if bad(sum) {
		return nil, invalid("%s = %v", metricString(name+"_sum", m), sum)
	}
	h := &Histogram{Count: count, Sum: sum}
	if n := len(dh.GetBucket()); n > 0 {
		h.Buckets = make([]Bucket, 0, n)
	}
	for _, b := range dh.GetBucket() {
		c := float64(b.GetCumulativeCount())
		if b.CumulativeCountFloat != nil {
			c = b.GetCumulativeCountFloat()
		}
		ub := b.GetUpperBound() * scale
		if math.IsNaN(ub) || ub < 0 {
			return nil, invalid("%s: bucket bound %v", metricString(name+"_bucket", m), ub)
		}
		if bad(c) {
			return nil, invalid("%s = %v", metricString(name+"_bucket", m, "le", fmtBound(ub)), c)
		}
		h.Buckets = append(h.Buckets, Bucket{UpperBound: ub, Count: c})
	}
	slices.SortFunc(h.Buckets, func(a, b Bucket) int {
		switch {
		case a.UpperBound < b.UpperBound:
			return -1
		case a.UpperBound > b.UpperBound:
			return 1
		}
		return 0
	})
	for i := 1; i < len(h.Buckets); i++ {
		prev, cur := h.Buckets[i-1], h.Buckets[i]
		if cur.UpperBound == prev.UpperBound {
			return nil, invalid("%s: bucket le=%s twice", metricString(name+"_bucket", m), fmtBound(cur.UpperBound))
		}
		if cur.Count < prev.Count {
			return nil, invalid("%s: buckets not cumulative (le=%s has %v, le=%s has %v)",
				metricString(name+"_bucket", m), fmtBound(prev.UpperBound), prev.Count, fmtBound(cur.UpperBound), cur.Count)
		}
	}
	return h, nil
}

// bad reports a value no count or sum may have.
func bad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }

func fmtBound(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// mergeHistograms adds b to a over their common bounds. Both have sorted,
// distinct bounds. It returns nil if a sum overflows.
func mergeHistograms(a, b *Histogram) *Histogram {
	out := &Histogram{Count: a.Count + b.Count, Sum: a.Sum + b.Sum}
	if math.IsInf(out.Count, 0) || math.IsInf(out.Sum, 0) {
		return nil
	}
	i, j := 0, 0
	for i < len(a.Buckets) && j < len(b.Buckets) {
		ab, bb := a.Buckets[i], b.Buckets[j]
		switch {
		case ab.UpperBound < bb.UpperBound:
			i++
		case ab.UpperBound > bb.UpperBound:
			j++
		default:
			c := ab.Count + bb.Count
			if math.IsInf(c, 0) {
				return nil
			}
			out.Buckets = append(out.Buckets, Bucket{UpperBound: ab.UpperBound, Count: c})
			i++
			j++
		}
	}
	return out
}
