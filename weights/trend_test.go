package weights

import (
	"math"
	"testing"
	"time"
)

// trendSig is a vLLM-like sample: queue, counters and a TTFT histogram
// whose requests all took under 100 ms (nil hist: no histogram).
func trendSig(queue, queries, hits float64, fast float64) *Signals {
	s := nanSignals()
	s.QueueDepth, s.PrefixQueries, s.PrefixHits = queue, queries, hits
	if fast >= 0 {
		s.TTFT = &Histogram{Count: fast, Buckets: []Bucket{{UpperBound: 0.1, Count: fast}, {UpperBound: 1, Count: fast}, {UpperBound: math.Inf(1), Count: fast}}}
	}
	return &s
}

func TestTrend(t *testing.T) {
	t0 := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC) // a step boundary
	type obs struct {
		at time.Duration
		s  *Signals
	}
	type want struct {
		at                  time.Duration // the step's start
		queue, hit, ttftP95 float64       // NaN: unknown
	}
	nan := math.NaN()
	// st is f steps.
	st := func(f float64) time.Duration { return time.Duration(f * float64(TrendStep)) }
	tests := []struct {
		name string
		obs  []obs
		now  time.Duration
		want []want
	}{{
		name: "steps: mean queue, hit rate and TTFT of each",
		obs: []obs{
			{0, trendSig(2, 1000, 0, 0)},
			{st(1.0 / 3), trendSig(4, 1100, 80, 10)}, // +100 lookups, +80 hits
			{st(2.0 / 3), trendSig(6, 1200, 160, 20)},
			{st(1), trendSig(1, 1300, 170, 30)}, // next step: +100, +10
			{st(4.0 / 3), trendSig(3, 1400, 180, 40)},
		},
		now: st(1.5),
		want: []want{
			// p95 of requests all in the first bucket: 0.95 × 0.1.
			{0, 4, 0.8, 0.095},
			{st(1), 2, 0.1, 0.095}, // the open step
		},
	}, {
		name: "a counter reset counts the later value",
		obs: []obs{
			{0, trendSig(0, 5000, 4000, -1)},
			{st(0.25), trendSig(0, 100, 50, -1)}, // restarted: +100, +50
			{st(0.5), trendSig(0, 200, 100, -1)},
		},
		now:  st(0.75),
		want: []want{{0, 0, 0.5, nan}},
	}, {
		name: "steps older than the window are dropped, gaps stay gaps",
		obs: []obs{
			{0, trendSig(9, 0, 0, -1)},
			{st(0.25), trendSig(9, 100, 100, -1)},
			{TrendWindow + st(1.25), trendSig(1, 200, 100, -1)},
			{TrendWindow + st(1.5), trendSig(3, 300, 150, -1)},
		},
		now: TrendWindow + st(1.75),
		// The late step's first increase spans the gap.
		want: []want{{TrendWindow + st(1), 2, 50.0 / 200, nan}},
	}, {
		name: "the first sample alone tells the queue only",
		obs:  []obs{{st(0.25), trendSig(7, 100, 90, 5)}},
		now:  st(0.5),
		want: []want{{0, 7, nan, nan}},
	}}
	same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 1e-12 }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr Trend
			for _, o := range tt.obs {
				tr.Add(t0.Add(o.at), o.s)
			}
			got := tr.Points(t0.Add(tt.now))
			if len(got) != len(tt.want) {
				t.Fatalf("%d points %+v, want %d", len(got), got, len(tt.want))
			}
			for i, w := range tt.want {
				g := got[i]
				if !g.Time.Equal(t0.Add(w.at)) || !same(g.QueueDepth, w.queue) || !same(g.HitRate, w.hit) || !same(g.TTFTP95, w.ttftP95) {
					t.Errorf("point %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// A replica scraped every 100 ms for an hour keeps at most one point per
// step of the window.
func TestTrendBounded(t *testing.T) {
	t0 := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	var tr Trend
	var at time.Time
	for i := range 36000 {
		at = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		tr.Add(at, trendSig(float64(i%10), float64(i*10), float64(i*5), float64(i)))
	}
	pts := tr.Points(at)
	if len(pts) != trendSteps {
		t.Errorf("%d points, want %d", len(pts), trendSteps)
	}
	if len(tr.points) > trendSteps {
		t.Errorf("%d closed points kept, more than %d", len(tr.points), trendSteps)
	}
	if first := pts[0].Time; at.Sub(first) > TrendWindow {
		t.Errorf("oldest point at %v, more than %v before %v", first, TrendWindow, at)
	}
	for _, p := range pts {
		if !near(p.HitRate, 0.5) || !near(p.QueueDepth, 4.5) {
			t.Fatalf("point %+v: want hit rate 0.5 and mean queue 4.5", p)
		}
	}
}

// Each changed decision is recorded with its reason, newest first, and
// only the latest MaxChanges are kept.
func TestRunnerChanges(t *testing.T) {
	t0 := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	p := &poolRunner{spec: PoolScrape{Config: DefaultConfig()}, replicas: map[string]*replicaRecord{}, ids: []string{"a", "b"}}
	sig := func(queue, kv float64) Signals {
		s := nanSignals()
		s.QueueDepth, s.KVOccupancy = queue, kv
		return s
	}
	type change struct {
		replica, kind string
		from, to      uint32
		reason        string
	}
	steps := []struct {
		obs  map[string]Signals
		res  Result
		want []change // this cycle's, in replica order
	}{{
		obs:  map[string]Signals{"a": sig(1, 0.1), "b": sig(1, 0.1)},
		res:  Result{Decisions: map[string]Decision{"a": {Weight: 2}, "b": {Weight: 2}}},
		want: nil, // first decisions change nothing
	}, {
		obs: map[string]Signals{"a": sig(20, 0.5), "b": sig(5, 0.7)},
		res: Result{Decisions: map[string]Decision{"a": {Weight: 2, Saturated: true}, "b": {Weight: 1}}},
		want: []change{
			{"a", ChangeEscape, 2, 2, "queue depth 20 ≥ 8 and ≥ 2× its peers' mean"},
			{"b", ChangeWeight, 2, 1, "free capacity: queue depth 5 of 8, KV occupancy 0.70 of 0.90"},
		},
	}, {
		obs:  map[string]Signals{"a": sig(1, 0.1), "b": sig(1, 0.1)},
		res:  Result{Decisions: map[string]Decision{"a": {Weight: 2}, "b": {Weight: 1}}},
		want: []change{{"a", ChangeReturn, 2, 2, "calm for 30s: queue depth below 4 and KV occupancy below 0.80, or level with its peers"}},
	}}
	var all []Change
	for i, s := range steps {
		now := t0.Add(time.Duration(i) * time.Second)
		var obs []Observation
		for _, id := range p.ids {
			obs = append(obs, Observation{ID: id, Time: now, Signals: s.obs[id]})
		}
		before := len(p.changes)
		p.observe(p.ids, obs, s.res, now)
		p.decisions = s.res.Decisions
		got := p.changes[before:]
		if len(got) != len(s.want) {
			t.Fatalf("cycle %d: changes %+v, want %+v", i, got, s.want)
		}
		for j, w := range s.want {
			g := got[j]
			if g.Replica != w.replica || g.Kind != w.kind || g.From != w.from || g.To != w.to || g.Reason != w.reason || !g.Time.Equal(now) {
				t.Errorf("cycle %d: change %+v, want %+v", i, g, w)
			}
		}
		all = append(all, got...)
	}
	v := p.view(t0.Add(time.Minute))
	if len(v.Changes) != len(all) || v.Changes[0] != all[len(all)-1] {
		t.Errorf("view's changes %+v, want %+v newest first", v.Changes, all)
	}
	if v.Escapes != 1 || v.WeightMoves != 1 {
		t.Errorf("%d escapes, %d weight moves; want 1 and 1", v.Escapes, v.WeightMoves)
	}
	if v := p.view(t0.Add(2 * time.Hour)); len(v.Changes) != 0 {
		t.Errorf("changes of two hours ago still in view: %+v", v.Changes)
	}

	// Many weight moves: only the latest MaxChanges stay.
	for i := range 3 * MaxChanges {
		now := t0.Add(time.Duration(10+i) * time.Second)
		w := uint32(1 + (i+1)%2)
		prevW := uint32(1 + i%2)
		p.decisions = map[string]Decision{"a": {Weight: prevW}, "b": {Weight: 1}}
		p.observe(p.ids, nil, Result{Decisions: map[string]Decision{"a": {Weight: w}, "b": {Weight: 1}}}, now)
	}
	v = p.view(t0.Add(10 * time.Minute))
	if len(v.Changes) != MaxChanges || len(p.changes) != MaxChanges {
		t.Fatalf("%d changes in view, %d kept; want %d", len(v.Changes), len(p.changes), MaxChanges)
	}
	if last := t0.Add(time.Duration(10+3*MaxChanges-1) * time.Second); !v.Changes[0].Time.Equal(last) {
		t.Errorf("newest change at %v, want %v", v.Changes[0].Time, last)
	}
}
