package weights

import (
	"math"
	"slices"
	"time"
)

// HistoryWindow is the window over which a Runner reports rates and
// percentiles.
const HistoryWindow = time.Minute

// historySlots bounds a History: the latest sample plus samples at least
// window/(historySlots-1) apart, so memory per replica is fixed whatever
// the scrape interval.
const historySlots = 16

// History is one replica's recent good observations, for what one
// scrape cannot tell: hit rate and preemption rate over a window, TTFT
// percentiles over it, the mean queue. It is bounded (historySlots
// samples, each a few counters and the TTFT bucket counts) and not safe
// for concurrent use. The zero value is not usable; see NewHistory.
type History struct {
	window  time.Duration
	spacing time.Duration
	// samples are oldest first; the last is the latest observation,
	// and every other one is at least spacing older than its successor.
	samples []sample
	bounds  []float64 // TTFT bucket bounds of every sample's ttft
	latest  Signals
}

type sample struct {
	t                       time.Time
	queue, queries, hits    float64
	preemptions, ttftCount  float64
	ttft                    []float64 // cumulative bucket counts; nil without TTFT
	hasTTFT                 bool
	hitRateGauge, occupancy float64
}

// NewHistory returns an empty History over window (HistoryWindow if 0).
func NewHistory(window time.Duration) *History {
	if window <= 0 {
		window = HistoryWindow
	}
	return &History{window: window, spacing: window / (historySlots - 1), samples: make([]sample, 0, historySlots)}
}

// Add folds in one good observation taken at t; older or duplicate ones
// are ignored, as Step ignores them.
func (h *History) Add(t time.Time, s *Signals) {
	n := len(h.samples)
	if n > 0 && !t.After(h.samples[n-1].t) {
		return
	}
	if s.TTFT != nil && !sameBounds(h.bounds, s.TTFT.Buckets) {
		// A new bucket layout (an engine upgrade): older samples no
		// longer compare.
		h.bounds = h.bounds[:0]
		for _, b := range s.TTFT.Buckets {
			h.bounds = append(h.bounds, b.UpperBound)
		}
		if needsInf(s.TTFT.Buckets) {
			h.bounds = append(h.bounds, math.Inf(1))
		}
		for i := range h.samples {
			h.samples[i].hasTTFT = false
		}
	}
	var slot *sample
	switch {
	case n >= 2 && h.samples[n-1].t.Sub(h.samples[n-2].t) < h.spacing:
		slot = &h.samples[n-1] // too close to its predecessor: replace it
	case n == historySlots:
		// Reuse the oldest slot's bucket slice for the newest.
		old := h.samples[0]
		copy(h.samples, h.samples[1:])
		h.samples[n-1] = sample{ttft: old.ttft[:0]}
		slot = &h.samples[n-1]
	default:
		h.samples = append(h.samples, sample{})
		slot = &h.samples[n]
	}
	buf := slot.ttft[:0]
	*slot = sample{
		t: t, queue: s.QueueDepth, queries: s.PrefixQueries, hits: s.PrefixHits,
		preemptions: s.Preemptions, hitRateGauge: s.PrefixHitRate, occupancy: s.KVOccupancy,
	}
	if s.TTFT != nil {
		for _, b := range s.TTFT.Buckets {
			buf = append(buf, b.Count)
		}
		if needsInf(s.TTFT.Buckets) {
			buf = append(buf, s.TTFT.Count)
		}
		slot.ttft, slot.hasTTFT, slot.ttftCount = buf, true, s.TTFT.Count
	} else {
		slot.ttft = buf
	}
	h.latest = *s
}

// needsInf reports a histogram without its +Inf bucket, whose count is
// then the histogram's count.
func needsInf(bs []Bucket) bool {
	return len(bs) == 0 || !math.IsInf(bs[len(bs)-1].UpperBound, 1)
}

func sameBounds(bounds []float64, bs []Bucket) bool {
	extra := 0
	if needsInf(bs) {
		extra = 1
	}
	if len(bounds) != len(bs)+extra || len(bounds) == 0 {
		return false
	}
	for i, b := range bs {
		if bounds[i] != b.UpperBound {
			return false
		}
	}
	return true
}

// Latest returns the latest good signals and when they were taken (zero
// before any).
func (h *History) Latest() (Signals, time.Time) {
	if len(h.samples) == 0 {
		return nanSignals(), time.Time{}
	}
	return h.latest, h.samples[len(h.samples)-1].t
}

// Window is what a History tells over its window, ending at its latest
// sample. An unknown value is NaN.
type Window struct {
	// QueueDepth is the mean queue depth of the samples.
	QueueDepth float64
	// PrefixQueries and PrefixHits are the counters' increases, for
	// adding replicas up; HitRate is their ratio, or the engine's own
	// hit-rate gauge for engines without counters.
	PrefixQueries, PrefixHits, HitRate float64
	// HitRateTotal is the engine's hit rate since it started (its
	// counters' ratio).
	HitRateTotal float64
	// TTFTP50 and TTFTP95 are percentiles of the requests whose first
	// token came within the window, in seconds, interpolated within
	// buckets as Prometheus's histogram_quantile does.
	TTFTP50, TTFTP95 float64
	// PreemptionRate is preemptions per second.
	PreemptionRate float64
}

// Window computes the window's figures. Counters that decrease between
// two samples were reset (an engine restart): the later value is the
// increase.
func (h *History) Window() Window {
	nan := math.NaN()
	w := Window{QueueDepth: nan, PrefixQueries: nan, PrefixHits: nan, HitRate: nan, HitRateTotal: nan,
		TTFTP50: nan, TTFTP95: nan, PreemptionRate: nan}
	n := len(h.samples)
	if n == 0 {
		return w
	}
	last := &h.samples[n-1]
	from := 0
	for from < n-1 && last.t.Sub(h.samples[from].t) > h.window {
		from++
	}
	in := h.samples[from:]

	var qsum float64
	var qn int
	for i := range in {
		if v, ok := usable(in[i].queue); ok {
			qsum += v
			qn++
		}
	}
	if qn > 0 {
		w.QueueDepth = qsum / float64(qn)
	}
	if q, ok := usable(last.queries); ok && q > 0 {
		if hits, ok := usable(last.hits); ok {
			w.HitRateTotal = min(hits/q, 1)
		}
	}
	if len(in) >= 2 {
		w.PrefixQueries = increase(in, func(s *sample) float64 { return s.queries })
		w.PrefixHits = increase(in, func(s *sample) float64 { return s.hits })
		if pre := increase(in, func(s *sample) float64 { return s.preemptions }); !math.IsNaN(pre) {
			w.PreemptionRate = pre / last.t.Sub(in[0].t).Seconds()
		}
		if w.PrefixQueries > 0 && !math.IsNaN(w.PrefixHits) {
			w.HitRate = min(w.PrefixHits/w.PrefixQueries, 1)
		}
		if d := h.ttftIncrease(in); d != nil {
			w.TTFTP50 = Quantile(0.5, h.bounds, d)
			w.TTFTP95 = Quantile(0.95, h.bounds, d)
		}
	}
	if math.IsNaN(w.HitRate) && math.IsNaN(w.PrefixQueries) {
		if v, ok := usable(last.hitRateGauge); ok {
			w.HitRate = min(v, 1)
		}
	}
	return w
}

// increase sums a counter's increases over consecutive samples that both
// carry it, rebasing resets; NaN if no pair does.
func increase(in []sample, get func(*sample) float64) float64 {
	total, any := 0.0, false
	for i := 1; i < len(in); i++ {
		prev, okp := usable(get(&in[i-1]))
		cur, okc := usable(get(&in[i]))
		if !okp || !okc {
			continue
		}
		any = true
		if d := cur - prev; d >= 0 {
			total += d
		} else {
			total += cur // reset: everything since is new
		}
	}
	if !any {
		return math.NaN()
	}
	return total
}

// ttftIncrease is the TTFT histogram of the requests within the window
// (bucket by bucket, resets rebased), or nil without two samples with
// the current layout.
func (h *History) ttftIncrease(in []sample) []float64 {
	// Usually every sample has the histogram and none was reset: the
	// increase is then the last minus the first, bucket by bucket.
	simple := true
	for i := range in {
		if !in[i].hasTTFT || i > 0 && in[i].ttftCount < in[i-1].ttftCount {
			simple = false
			break
		}
	}
	if simple && len(in) >= 2 {
		first, last := in[0].ttft, in[len(in)-1].ttft
		out := make([]float64, len(h.bounds))
		for j := range out {
			out[j] = max(last[j]-first[j], 0)
		}
		return out
	}
	var out []float64
	for i := 1; i < len(in); i++ {
		prev, cur := &in[i-1], &in[i]
		if !prev.hasTTFT || !cur.hasTTFT {
			continue
		}
		if out == nil {
			out = make([]float64, len(h.bounds))
		}
		reset := cur.ttftCount < prev.ttftCount
		for j := range out {
			if d := cur.ttft[j] - prev.ttft[j]; !reset && d >= 0 {
				out[j] += d
			} else if reset {
				out[j] += cur.ttft[j]
			}
		}
	}
	return out
}

// Quantile is the q-quantile of a cumulative histogram (bucket upper
// bounds and counts), as Prometheus's histogram_quantile computes it:
// linear interpolation within the bucket that holds rank q×total, the
// first bucket starting at 0, and the highest finite bound when the rank
// falls in the +Inf bucket. NaN for an empty histogram.
func Quantile(q float64, bounds, counts []float64) float64 {
	n := min(len(bounds), len(counts))
	if n == 0 {
		return math.NaN()
	}
	total := counts[n-1]
	if !(total > 0) {
		return math.NaN()
	}
	rank := q * total
	i, _ := slices.BinarySearchFunc(counts[:n], rank, func(c, r float64) int {
		if c < r {
			return -1
		}
		return 1
	})
	if i >= n {
		i = n - 1
	}
	if math.IsInf(bounds[i], 1) {
		if i == 0 {
			return math.NaN()
		}
		return bounds[i-1]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = bounds[i-1], counts[i-1]
	}
	if counts[i] == below {
		return bounds[i]
	}
	return lower + (bounds[i]-lower)*(rank-below)/(counts[i]-below)
}
