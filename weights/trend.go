package weights

import (
	"math"
	"slices"
	"time"
)

// TrendWindow is how far back a replica's Trend goes, in TrendStep steps.
const (
	TrendWindow = 15 * time.Minute
	TrendStep   = 15 * time.Second
)

// trendSteps bounds a Trend: memory per replica is fixed whatever the
// scrape interval.
const trendSteps = int(TrendWindow / TrendStep)

// TrendPoint is one step of a replica's trend: what its good scrapes in
// [Time, Time+TrendStep) told. An unknown value is NaN.
type TrendPoint struct {
	Time time.Time
	// QueueDepth is the mean queue depth of the step's scrapes.
	QueueDepth float64
	// HitRate is the prefix-cache hits over lookups of the step (the
	// engine's hit-rate gauge, averaged, for engines without counters).
	HitRate float64
	// TTFTP95 is the 95th percentile of the time to first token of the
	// requests whose first token came within the step, in seconds.
	TTFTP95 float64
}

// Trend is a replica's recent past at a coarser grain than History:
// TrendWindow in TrendStep steps, for a sparkline of its queue, hit rate
// and TTFT. Each closed step keeps three numbers; only the open step and
// the previous sample keep counters and TTFT bucket counts. It is not
// safe for concurrent use. The zero value is an empty Trend.
type Trend struct {
	points []TrendPoint // closed steps, oldest first
	open   trendStep
	prev   trendSample
}

// trendStep accumulates the open step.
type trendStep struct {
	start         time.Time
	samples       int
	queueSum      float64
	queueN        int
	queries, hits float64
	counted       bool // queries and hits hold a known increase
	gaugeSum      float64
	gaugeN        int
	ttft          []float64 // increase per bucket; nil without one
	bounds        []float64
}

// trendSample is the previous good sample's counters.
type trendSample struct {
	ok            bool
	t             time.Time
	queries, hits float64
	bounds        []float64
	ttft          []float64 // cumulative bucket counts, +Inf last
	ttftCount     float64
}

// Add folds in one good observation taken at t; older or duplicate ones
// are ignored.
func (tr *Trend) Add(t time.Time, s *Signals) {
	if tr.prev.ok && !t.After(tr.prev.t) {
		return
	}
	start := t.Truncate(TrendStep)
	if tr.open.samples > 0 && !start.Equal(tr.open.start) {
		tr.close()
	}
	st := &tr.open
	if st.samples == 0 {
		st.start = start
	}
	st.samples++
	if q, ok := usable(s.QueueDepth); ok {
		st.queueSum += q
		st.queueN++
	}
	if g, ok := usable(s.PrefixHitRate); ok {
		st.gaugeSum += g
		st.gaugeN++
	}
	p := &tr.prev
	if p.ok {
		dq, okq := counterIncrease(p.queries, s.PrefixQueries)
		dh, okh := counterIncrease(p.hits, s.PrefixHits)
		if okq && okh {
			st.queries += dq
			st.hits += dh
			st.counted = true
		}
		if s.TTFT != nil && p.ttft != nil && sameBounds(p.bounds, s.TTFT.Buckets) {
			tr.addTTFT(s.TTFT)
		}
	}
	// Remember this sample's counters for the next increase.
	p.ok, p.t, p.queries, p.hits = true, t, s.PrefixQueries, s.PrefixHits
	p.ttft, p.bounds = p.ttft[:0], p.bounds[:0]
	if s.TTFT != nil {
		for _, b := range s.TTFT.Buckets {
			p.bounds = append(p.bounds, b.UpperBound)
			p.ttft = append(p.ttft, b.Count)
		}
		if needsInf(s.TTFT.Buckets) {
			p.bounds = append(p.bounds, math.Inf(1))
			p.ttft = append(p.ttft, s.TTFT.Count)
		}
		p.ttftCount = s.TTFT.Count
	} else {
		p.ttft = nil
	}
}

// addTTFT adds the increase of the TTFT histogram since the previous
// sample (whose bucket layout is h's) to the open step.
func (tr *Trend) addTTFT(h *Histogram) {
	st, p := &tr.open, &tr.prev
	if st.ttft == nil || !slices.Equal(st.bounds, p.bounds) {
		st.bounds = append(st.bounds[:0], p.bounds...)
		st.ttft = make([]float64, len(p.bounds))
	}
	reset := h.Count < p.ttftCount
	for j := range st.ttft {
		cur := h.Count // the +Inf bucket when the histogram has none
		if j < len(h.Buckets) {
			cur = h.Buckets[j].Count
		}
		if d := cur - p.ttft[j]; !reset && d >= 0 {
			st.ttft[j] += d
		} else if reset {
			st.ttft[j] += cur
		}
	}
}

// close turns the open step into a point and drops points older than
// the window.
func (tr *Trend) close() {
	st := &tr.open
	tr.points = append(tr.points, st.point())
	if n := len(tr.points); n > trendSteps {
		tr.points = append(tr.points[:0], tr.points[n-trendSteps:]...)
	}
	*st = trendStep{}
}

func (st *trendStep) point() TrendPoint {
	nan := math.NaN()
	pt := TrendPoint{Time: st.start, QueueDepth: nan, HitRate: nan, TTFTP95: nan}
	if st.queueN > 0 {
		pt.QueueDepth = st.queueSum / float64(st.queueN)
	}
	switch {
	case st.counted && st.queries > 0:
		pt.HitRate = min(st.hits/st.queries, 1)
	case !st.counted && st.gaugeN > 0:
		pt.HitRate = min(st.gaugeSum/float64(st.gaugeN), 1)
	}
	if st.ttft != nil {
		pt.TTFTP95 = Quantile(0.95, st.bounds, st.ttft)
	}
	return pt
}

// Points returns the steps within TrendWindow of now, oldest first, the
// open step last (it covers less than a step).
func (tr *Trend) Points(now time.Time) []TrendPoint {
	from := now.Add(-TrendWindow)
	out := make([]TrendPoint, 0, len(tr.points)+1)
	for _, pt := range tr.points {
		if pt.Time.After(from) {
			out = append(out, pt)
		}
	}
	if tr.open.samples > 0 && tr.open.start.After(from) {
		out = append(out, tr.open.point())
	}
	return out
}

// counterIncrease is a counter's increase between two samples, a reset
// counting the later value; false if either is unknown.
func counterIncrease(prev, cur float64) (float64, bool) {
	p, okp := usable(prev)
	c, okc := usable(cur)
	if !okp || !okc {
		return 0, false
	}
	if d := c - p; d >= 0 {
		return d, true
	}
	return c, true
}
