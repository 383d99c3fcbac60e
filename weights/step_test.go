package weights

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var stepT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// stepAt is the fake clock: stepT0 plus sec seconds.
func stepAt(sec float64) time.Time { return stepT0.Add(time.Duration(sec * float64(time.Second))) }

func absentSignals() Signals {
	n := math.NaN()
	return Signals{QueueDepth: n, Running: n, KVOccupancy: n, Preemptions: n,
		PrefixQueries: n, PrefixHits: n, PrefixHitRate: n}
}

func sigQ(v float64) *Signals  { s := absentSignals(); s.QueueDepth = v; return &s }
func sigKV(v float64) *Signals { s := absentSignals(); s.KVOccupancy = v; return &s }
func sigQP(v, pre float64) *Signals {
	s := absentSignals()
	s.QueueDepth, s.Preemptions = v, pre
	return &s
}

func goodObs(id string, sec float64, s *Signals) Observation {
	return Observation{ID: id, Time: stepAt(sec), Signals: *s}
}

func failedObs(id string, sec float64) Observation {
	return Observation{ID: id, Time: stepAt(sec), Signals: absentSignals(),
		Err: &ScrapeError{Kind: FailTimeout, Err: errors.New("deadline exceeded")}}
}

// stepTestConfig has no smoothing, so that scripts are exact; weights 1..4.
// Free capacity from the queue is 1 − q/10; level bands are quarters and
// the hysteresis is 0.125.
func stepTestConfig() Config {
	return Config{
		Weighting: Weighting{
			MinWeight: 1, MaxWeight: 4, Levels: 4,
			Smoothing: 1, Hysteresis: 0.5, MinChangeInterval: 60 * time.Second,
		},
		Escape: Escape{
			MaxQueueDepth: 10, ResumeQueueDepth: 5,
			MaxKVOccupancy: 0.9, ResumeKVOccupancy: 0.8,
			MaxPreemptionRate: 0.5,
			Hold:              30 * time.Second,
			// 1: a single replica may be taken out (no fallback).
			MaxSaturatedFraction: 1,
		},
		StaleAfter: 60 * time.Second,
	}
}

// stepTick is one round for the single replica "r": an observation (sig nil
// means a failed scrape; skip means none at all) and the decision wanted.
type stepTick struct {
	at    float64
	obsAt float64 // observation time if not at (for out-of-order ones)
	sig   *Signals
	skip  bool
	want  Decision
}

var (
	wantServing = func(w uint32) Decision { return Decision{Weight: w} }
	wantOut     = func(w uint32) Decision { return Decision{Weight: w, Saturated: true} }
	wantStale   = func(w uint32) Decision { return Decision{Weight: w, Stale: true} }
)

func runStepTicks(t *testing.T, cfg Config, ticks []stepTick) {
	t.Helper()
	var st State
	for _, tk := range ticks {
		var obs []Observation
		switch {
		case tk.skip:
		case tk.sig == nil:
			obs = append(obs, failedObs("r", tk.at))
		default:
			when := tk.at
			if tk.obsAt != 0 {
				when = tk.obsAt
			}
			obs = append(obs, goodObs("r", when, tk.sig))
		}
		var res Result
		st, res = Step(cfg, st, []string{"r"}, obs, stepAt(tk.at))
		if got := res.Decisions["r"]; got != tk.want {
			t.Fatalf("t=%vs: got %+v, want %+v", tk.at, got, tk.want)
		}
		if len(res.Decisions) != 1 {
			t.Fatalf("t=%vs: %d decisions, want 1", tk.at, len(res.Decisions))
		}
	}
}

func TestStepWeightLevels(t *testing.T) {
	for _, tc := range []struct {
		min, max uint32
		levels   int
		want     []uint32
	}{
		{1, 4, 4, []uint32{1, 2, 3, 4}},
		{1, 10, 4, []uint32{1, 4, 7, 10}},
		{1, 4, 3, []uint32{1, 3, 4}}, // 2.5 rounds half up
		{2, 2, 1, []uint32{2}},
		{1, 8, 1, []uint32{8}}, // one level: the top weight
		{1, 1 << 31, 2, []uint32{1, 1 << 31}},
	} {
		c := Config{Weighting: Weighting{MinWeight: tc.min, MaxWeight: tc.max, Levels: tc.levels}}
		var got []uint32
		for l := range tc.levels {
			got = append(got, c.levelWeight(l))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%d..%d in %d levels: got %v, want %v", tc.min, tc.max, tc.levels, got, tc.want)
		}
	}
}

// TestStepNoiseInsideBand: with no smoothing at all (the worst case), free
// capacity jumping around inside the hysteresis band never moves a weight,
// even when it straddles both boundaries of the level.
func TestStepNoiseInsideBand(t *testing.T) {
	cfg := stepTestConfig()
	cfg.MinChangeInterval = 0 // only hysteresis holds the weight
	rng := rand.New(rand.NewPCG(1, 2))
	var st State
	var res Result
	sec := 0.0
	step := func(queue float64) uint32 {
		sec += 5
		st, res = Step(cfg, st, []string{"r"}, []Observation{goodObs("r", sec, sigQ(queue))}, stepAt(sec))
		return res.Decisions["r"].Weight
	}
	// Top level: stays while s ≥ 0.75 − 0.125, i.e. q ≤ 3.75.
	if w := step(0); w != 4 {
		t.Fatalf("idle replica: weight %d, want 4", w)
	}
	for range 500 {
		if w := step(3.7 * rng.Float64()); w != 4 {
			t.Fatalf("t=%vs: noise moved the top weight to %d", sec, w)
		}
	}
	// f = 0.45 is below 0.75 − 0.125: down, but only to level 2, whose band
	// with hysteresis is [0.375, 0.875), i.e. q in (1.25, 6.25].
	if w := step(5.5); w != 3 {
		t.Fatalf("sustained load: weight %d, want 3", w)
	}
	for range 500 {
		if w := step(1.3 + 4.9*rng.Float64()); w != 3 {
			t.Fatalf("t=%vs: noise straddling 0.5 and 0.75 moved the weight to %d", sec, w)
		}
	}
}

func TestStepSustainedChange(t *testing.T) {
	t.Run("interval", func(t *testing.T) {
		runStepTicks(t, stepTestConfig(), []stepTick{
			{at: 0, sig: sigQ(0), want: wantServing(4)},
			{at: 10, sig: sigQ(9), want: wantServing(1)}, // f 0.1: several levels at once
			{at: 20, sig: sigQ(1), want: wantServing(1)}, // warranted, blocked until 70
			{at: 40, sig: sigQ(1), want: wantServing(1)},
			{at: 69, sig: sigQ(1), want: wantServing(1)},
			{at: 70, sig: sigQ(1), want: wantServing(4)}, // blocked change happens later
			{at: 80, sig: sigQ(9), want: wantServing(4)}, // blocked until 130 ...
			{at: 90, sig: sigQ(1), want: wantServing(4)}, // ... and no longer warranted
			{at: 130, sig: sigQ(1), want: wantServing(4)},
			{at: 140, sig: sigQ(1), want: wantServing(4)},
		})
	})
	t.Run("smoothed", func(t *testing.T) {
		// Smoothing 0.3 from f = 1 to f = 0: s = 0.7^k. Level 2 at k = 2
		// (s 0.49 < 0.625); level 1 is warranted at k = 3 but blocked until
		// t = 80, when s = 0.7^8 ≈ 0.058 warrants level 0 directly.
		cfg := stepTestConfig()
		cfg.Smoothing = 0.3
		ticks := []stepTick{{at: 0, sig: sigQ(0), want: wantServing(4)}, {at: 10, sig: sigQ(10 - 1e-9), want: wantServing(4)}}
		for k := 2; k <= 12; k++ {
			w := uint32(3)
			if k >= 8 {
				w = 1
			}
			ticks = append(ticks, stepTick{at: float64(10 * k), sig: sigQ(10 - 1e-9), want: wantServing(w)})
		}
		runStepTicks(t, cfg, ticks)
	})
	t.Run("range", func(t *testing.T) {
		// Extremes, out-of-scale and absent values: weights stay in [Min, Max].
		cfg := stepTestConfig()
		cfg.MinChangeInterval = 0
		cfg.Hold = 0
		var st State
		for i, s := range []*Signals{sigQ(0), sigQ(100), sigQ(-3), sigKV(1.5), sigQ(0), sigKV(0), sigQ(9.99), sigQ(math.Inf(1)), sigQ(0)} {
			var res Result
			st, res = Step(cfg, st, []string{"r"}, []Observation{goodObs("r", float64(i), s)}, stepAt(float64(i)))
			if w := res.Decisions["r"].Weight; w < cfg.MinWeight || w > cfg.MaxWeight {
				t.Fatalf("step %d: weight %d out of [%d, %d]", i, w, cfg.MinWeight, cfg.MaxWeight)
			}
		}
	})
}

func TestStepSaturation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   func(*Config)
		ticks []stepTick
	}{
		{"queue spike", nil, []stepTick{
			{at: 0, sig: sigQ(0), want: wantServing(4)},
			{at: 5, sig: sigQ(10), want: wantOut(4)}, // at once, weight frozen
			{at: 10, sig: sigQ(7), want: wantOut(4)}, // below max, above resume
			{at: 15, sig: sigQ(3), want: wantOut(4)}, // hold starts
			{at: 40, sig: sigQ(3), want: wantOut(4)},
			{at: 44, sig: sigQ(3), want: wantOut(4)},
			{at: 45, sig: sigQ(3), want: wantServing(4)}, // 30s below resume
		}},
		{"queue dip during hold", nil, []stepTick{
			{at: 0, sig: sigQ(0), want: wantServing(4)},
			{at: 5, sig: sigQ(12), want: wantOut(4)},
			{at: 15, sig: sigQ(3), want: wantOut(4)},
			{at: 25, sig: sigQ(6), want: wantOut(4)}, // back above resume: hold restarts
			{at: 30, sig: sigQ(3), want: wantOut(4)},
			{at: 50, sig: sigQ(3), want: wantOut(4)},
			{at: 55, sig: sigQ(3), want: wantOut(4)},
			{at: 60, sig: sigQ(3), want: wantServing(4)},
		}},
		{"KV spike", nil, []stepTick{
			{at: 0, sig: sigKV(0.2), want: wantServing(4)},
			{at: 5, sig: sigKV(0.9), want: wantOut(4)},
			{at: 10, sig: sigKV(0.2), want: wantOut(4)},
			{at: 20, sig: sigKV(0.85), want: wantOut(4)}, // dip: restarts the hold
			{at: 25, sig: sigKV(0.2), want: wantOut(4)},
			{at: 50, sig: sigKV(0.2), want: wantOut(4)},
			{at: 55, sig: sigKV(0.2), want: wantServing(4)},
		}},
		{"preemption", nil, []stepTick{
			{at: 0, sig: sigQP(0, 0), want: wantServing(4)},
			{at: 5, sig: sigQP(0, 10), want: wantOut(4)}, // 2/s > 0.5/s
			{at: 10, sig: sigQP(0, 10), want: wantOut(4)},
			{at: 25, sig: sigQP(0, 11), want: wantOut(4)}, // 0.2/s: not saturating, but not calm
			{at: 30, sig: sigQP(0, 11), want: wantOut(4)},
			{at: 55, sig: sigQP(0, 11), want: wantOut(4)},
			{at: 60, sig: sigQP(0, 11), want: wantServing(4)},
		}},
		{"slow preemption is not saturation", nil, []stepTick{
			{at: 0, sig: sigQP(0, 0), want: wantServing(4)},
			{at: 10, sig: sigQP(0, 5), want: wantServing(4)}, // exactly 0.5/s
			{at: 20, sig: sigQP(0, 6), want: wantServing(4)},
		}},
		{"counter reset is not preemption", nil, []stepTick{
			{at: 0, sig: sigQP(0, 100), want: wantServing(4)},
			{at: 5, sig: sigQP(0, 3), want: wantServing(4)}, // engine restarted: rebase
			{at: 10, sig: sigQP(0, 3), want: wantServing(4)},
			{at: 15, sig: sigQP(0, 4), want: wantServing(4)},    // 0.2/s
			{at: 20, sig: sigQP(0, 50), want: wantOut(4)},       // rate from the rebased counter
			{at: 25, sig: sigQP(0, 50), want: wantOut(4)},       // hold starts
			{at: 30, sig: sigQP(0, 0), want: wantOut(4)},        // reset during hold: still calm
			{at: 55, sig: sigQP(0, 0), want: wantServing(4)},    // 30s after 25
			{at: 60, sig: sigQ(0), want: wantServing(4)},        // counter gone
			{at: 65, sig: sigQP(0, 1000), want: wantServing(4)}, // counter back: rebase, no rate
		}},
		{"sustain: a burst shorter than it stays in", func(c *Config) { c.Sustain = 10 * time.Second }, []stepTick{
			{at: 0, sig: sigQ(0), want: wantServing(4)},
			{at: 5, sig: sigQ(12), want: wantServing(1)}, // hot run starts; the weight still follows
			{at: 10, sig: sigQ(12), want: wantServing(1)},
			{at: 12, sig: sigQ(6), want: wantServing(1)}, // below max: the run breaks
			{at: 15, sig: sigQ(12), want: wantServing(1)},
			{at: 20, sig: sigQ(12), want: wantServing(1)},
			{at: 25, sig: sigQ(12), want: wantOut(1)}, // 10 s hot since 15
			{at: 30, sig: sigQ(12), want: wantOut(1)},
		}},
		{"sustain: failed scrapes do not break the run", func(c *Config) { c.Sustain = 10 * time.Second }, []stepTick{
			{at: 0, sig: sigKV(0.95), want: wantServing(1)},
			{at: 5, want: wantServing(1)}, // failed
			{at: 10, sig: sigKV(0.95), want: wantOut(1)},
		}},
		{"sustain: preemptions too", func(c *Config) { c.Sustain = 10 * time.Second }, []stepTick{
			{at: 0, sig: sigQP(0, 0), want: wantServing(4)},
			{at: 5, sig: sigQP(0, 10), want: wantServing(4)},
			{at: 10, sig: sigQP(0, 10), want: wantServing(4)}, // no preemption: the run breaks
			{at: 15, sig: sigQP(0, 20), want: wantServing(4)},
			{at: 20, sig: sigQP(0, 30), want: wantServing(4)},
			{at: 25, sig: sigQP(0, 40), want: wantOut(4)},
		}},
		{"sustain: the hold is unchanged once out", func(c *Config) { c.Sustain = 5 * time.Second }, []stepTick{
			{at: 0, sig: sigQ(0), want: wantServing(4)},
			{at: 5, sig: sigQ(10), want: wantServing(1)},
			{at: 10, sig: sigQ(10), want: wantOut(1)},
			{at: 15, sig: sigQ(3), want: wantOut(1)},
			{at: 45, sig: sigQ(3), want: wantServing(1)},
			{at: 50, sig: sigQ(10), want: wantServing(1)}, // a new run must last Sustain again
			{at: 55, sig: sigQ(10), want: wantOut(1)},
		}},
		{"weight frozen while out, kept on return", func(c *Config) { c.Smoothing = 0.5 }, []stepTick{
			{at: 0, sig: sigQ(7), want: wantServing(2)},   // s 0.3: level 1
			{at: 100, sig: sigQ(10), want: wantOut(2)},    // f = 0 is not folded ...
			{at: 105, sig: sigQ(9), want: wantOut(2)},     // ... nor is anything while out
			{at: 110, sig: sigQ(3), want: wantOut(2)},     // calm: hold starts
			{at: 140, sig: sigQ(3), want: wantServing(2)}, // back at its weight; s = (0.3+0.7)/2
			{at: 145, sig: sigQ(3), want: wantServing(2)}, // s 0.6 < 0.5 + 0.125
			{at: 150, sig: sigQ(3), want: wantServing(3)}, // s 0.65: up
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := stepTestConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			runStepTicks(t, cfg, tc.ticks)
		})
	}
}

// TestStepSeveralObservationsPerRound: observations are folded in order.
func TestStepSeveralObservationsPerRound(t *testing.T) {
	ids := []string{"r"}
	for _, tc := range []struct {
		hold time.Duration
		want bool // saturated
	}{{0, false}, {30 * time.Second, true}} {
		cfg := stepTestConfig()
		cfg.Hold = tc.hold
		st, _ := Step(cfg, State{}, ids, []Observation{goodObs("r", 0, sigQ(0))}, stepAt(0))
		_, res := Step(cfg, st, ids, []Observation{goodObs("r", 1, sigQ(10)), goodObs("r", 2, sigQ(1))}, stepAt(2))
		if got := res.Decisions["r"].Saturated; got != tc.want {
			t.Errorf("hold %v: saturated %v, want %v", tc.hold, got, tc.want)
		}
	}
}

func TestStepStaleMetrics(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ticks []stepTick
	}{
		{"last good signals kept, then stale", []stepTick{
			{at: 0, sig: sigQ(7), want: wantServing(2)},
			{at: 5, sig: sigQ(10), want: wantOut(2)},
			{at: 10, sig: nil, want: wantOut(2)}, // failed scrapes: last good signals still rule
			{at: 60, sig: nil, want: wantOut(2)},
			{at: 65, skip: true, want: wantOut(2)}, // 60s after the last good one
			{at: 66, sig: nil, want: wantStale(4)}, // stale: Serving, neutral (none fresh: top)
			{at: 70, sig: nil, want: wantStale(4)},
			{at: 75, sig: sigQ(9), want: wantServing(4)},  // resumes at the neutral level; the forced
			{at: 125, sig: sigQ(9), want: wantServing(4)}, // change at 66 restarts the interval
			{at: 126, sig: sigQ(9), want: wantServing(1)}, // and the move happens once allowed
			{at: 130, sig: sigQ(10), want: wantOut(1)},    // saturation is judged afresh
		}},
		{"no capacity signal", []stepTick{
			{at: 0, sig: sigQP(math.NaN(), 0), want: wantServing(4)}, // fresh, weight stays
			{at: 10, sig: sigQP(math.NaN(), 50), want: wantOut(4)},   // but the escape hatch works
		}},
		{"failed scrapes alone never saturate", []stepTick{
			{at: 0, sig: nil, want: wantServing(4)},
			{at: 30, sig: nil, want: wantServing(4)},
			{at: 60, sig: nil, want: wantServing(4)},
			{at: 61, sig: nil, want: wantStale(4)},       // never reported, listed 61s ago
			{at: 62, sig: sigQ(9), want: wantServing(1)}, // first reading moves it at once
		}},
		{"failed scrapes keep the weight", []stepTick{
			{at: 0, sig: sigQ(0), want: wantServing(4)},
			{at: 10, sig: nil, want: wantServing(4)},
			{at: 20, sig: nil, want: wantServing(4)},
			{at: 30, sig: sigQ(9), want: wantServing(1)},
			{at: 40, sig: nil, want: wantServing(1)},
		}},
		{"out of order observations are ignored", []stepTick{
			{at: 0, sig: sigQ(0), want: wantServing(4)},
			{at: 10, sig: sigQ(0), want: wantServing(4)},
			{at: 15, obsAt: 5, sig: sigQ(10), want: wantServing(4)},  // older than t=10
			{at: 20, obsAt: 10, sig: sigQ(10), want: wantServing(4)}, // duplicate time
			{at: 25, sig: sigQ(10), want: wantOut(4)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { runStepTicks(t, stepTestConfig(), tc.ticks) })
	}
}

// stepPool drives Step for several replicas.
type stepPool struct {
	t   *testing.T
	cfg Config
	st  State
	ids []string
}

func (p *stepPool) step(sec float64, obs ...Observation) Result {
	p.t.Helper()
	var res Result
	p.st, res = Step(p.cfg, p.st, p.ids, obs, stepAt(sec))
	if n := len(slices.Compact(slices.Sorted(slices.Values(p.ids)))); len(res.Decisions) != n {
		p.t.Fatalf("t=%vs: %d decisions for %d ids", sec, len(res.Decisions), n)
	}
	return res
}

// stepHealths renders the pool's health as e.g. "a:serving b:saturated".
func stepHealths(res Result, ids []string) string {
	var b strings.Builder
	for _, id := range ids {
		h := "serving"
		if res.Decisions[id].Saturated {
			h = "saturated"
		}
		fmt.Fprintf(&b, "%s:%s ", id, h)
	}
	return strings.TrimSpace(b.String())
}

func TestStepFallback(t *testing.T) {
	cfg := stepTestConfig()
	cfg.MaxSaturatedFraction = 0.5 // 2 of 4
	ids := []string{"a", "b", "c", "d"}
	p := &stepPool{t: t, cfg: cfg, ids: ids}
	round := func(sec float64, qs ...float64) []Observation {
		var obs []Observation
		for i, v := range qs {
			obs = append(obs, goodObs(ids[i], sec, sigQ(v)))
		}
		return obs
	}
	for _, tc := range []struct {
		at        float64
		qs        []float64
		health    string
		fallback  bool
		saturated int
	}{
		{0, []float64{0, 0, 0, 0}, "a:serving b:serving c:serving d:serving", false, 0},
		{5, []float64{10, 10, 0, 0}, "a:saturated b:saturated c:serving d:serving", false, 2},
		{10, []float64{10, 10, 10, 0}, "a:serving b:serving c:serving d:serving", true, 3},
		{15, []float64{10, 10, 3, 0}, "a:serving b:serving c:serving d:serving", true, 3}, // c holds
		{40, []float64{10, 10, 3, 0}, "a:serving b:serving c:serving d:serving", true, 3},
		{45, []float64{10, 10, 3, 0}, "a:saturated b:saturated c:serving d:serving", false, 2},
		{50, []float64{3, 3, 3, 0}, "a:saturated b:saturated c:serving d:serving", false, 2},
	} {
		res := p.step(tc.at, round(tc.at, tc.qs...)...)
		if got := stepHealths(res, ids); got != tc.health || res.Fallback != tc.fallback || res.Saturated != tc.saturated {
			t.Fatalf("t=%vs: %s fallback=%v saturated=%d; want %s fallback=%v saturated=%d",
				tc.at, got, res.Fallback, res.Saturated, tc.health, tc.fallback, tc.saturated)
		}
	}

	// Limits: floor(fraction × n), exceeded strictly.
	for _, tc := range []struct {
		fraction float64
		n, sat   int
		fallback bool
	}{
		{0.5, 1, 1, true}, // never take out the only replica
		{0.5, 2, 1, false},
		{0.5, 3, 2, true},
		{0.29, 100, 29, false}, // 0.29×100 is 28.999… in floating point
		{0.29, 100, 30, true},
		{0, 4, 1, true},
		{1, 4, 4, false},
	} {
		cfg := stepTestConfig()
		cfg.MaxSaturatedFraction = tc.fraction
		var obs []Observation
		names := make([]string, tc.n)
		for i := range tc.n {
			names[i] = fmt.Sprintf("r%03d", i)
			v := 0.0
			if i < tc.sat {
				v = 10
			}
			obs = append(obs, goodObs(names[i], 0, sigQ(v)))
		}
		_, res := Step(cfg, State{}, names, obs, stepAt(0))
		if res.Fallback != tc.fallback || res.Saturated != tc.sat {
			t.Errorf("fraction %v, %d of %d saturated: fallback=%v saturated=%d, want %v",
				tc.fraction, tc.sat, tc.n, res.Fallback, res.Saturated, tc.fallback)
		}
		for id, d := range res.Decisions {
			if res.Fallback && d.Saturated {
				t.Errorf("fraction %v: %s is saturated in fallback", tc.fraction, id)
			}
		}
	}
}

func TestStepNeutralWeight(t *testing.T) {
	cfg := stepTestConfig()
	ids := []string{"a", "b", "c", "d", "e"}
	p := &stepPool{t: t, cfg: cfg, ids: ids}
	// a level 0 (w1), b level 1 (w2), c level 3 (w4); d is good then fails;
	// e never reports.
	fresh := func(sec float64) []Observation {
		return []Observation{goodObs("a", sec, sigQ(9)), goodObs("b", sec, sigQ(7)), goodObs("c", sec, sigQ(0))}
	}
	res := p.step(0, append(fresh(0), goodObs("d", 0, sigQ(0)), failedObs("e", 0))...)
	want := map[string]Decision{"a": wantServing(1), "b": wantServing(2), "c": wantServing(4),
		"d": wantServing(4), "e": wantServing(4)} // no fresh level yet: e gets the top one
	if !reflect.DeepEqual(res.Decisions, want) {
		t.Fatalf("t=0: %v, want %v", res.Decisions, want)
	}
	res = p.step(10, append(fresh(10), failedObs("d", 10), failedObs("e", 10))...)
	// Lower median of fresh levels [0 1 3 3] is 1: weight 2 for e.
	want = map[string]Decision{"a": wantServing(1), "b": wantServing(2), "c": wantServing(4),
		"d": wantServing(4), "e": wantServing(2)}
	if !reflect.DeepEqual(res.Decisions, want) {
		t.Fatalf("t=10: %v, want %v", res.Decisions, want)
	}
	res = p.step(61, append(fresh(61), failedObs("d", 61), failedObs("e", 61))...)
	// d is stale now; the median of [0 1 3] is 1.
	want = map[string]Decision{"a": wantServing(1), "b": wantServing(2), "c": wantServing(4),
		"d": wantStale(2), "e": wantStale(2)}
	if !reflect.DeepEqual(res.Decisions, want) || res.Stale != 2 {
		t.Fatalf("t=61: %v stale=%d, want %v stale=2", res.Decisions, res.Stale, want)
	}
	// Even count: [0 3] gives the lower one.
	p.ids = []string{"a", "c", "d"}
	res = p.step(70, goodObs("a", 70, sigQ(9)), goodObs("c", 70, sigQ(0)))
	if got := res.Decisions["d"]; got != wantStale(1) {
		t.Fatalf("t=70: d %v, want %v", got, wantStale(1))
	}
	// Nobody fresh: top level.
	res = p.step(200)
	for id, d := range res.Decisions {
		if d != wantStale(4) {
			t.Fatalf("t=200: %s %v, want %v", id, d, wantStale(4))
		}
	}
}

func TestStepMembership(t *testing.T) {
	cfg := stepTestConfig()
	p := &stepPool{t: t, cfg: cfg, ids: []string{"a", "b"}}
	p.step(0, goodObs("a", 0, sigQ(10)), goodObs("b", 0, sigQ(9)), goodObs("x", 0, sigQ(10)))
	if _, ok := p.st.replicas["x"]; ok {
		t.Fatal("an observation of an id not in ids created state")
	}
	p.ids = []string{"b", "c", "c"} // a removed, c new (listed twice)
	res := p.step(5, goodObs("b", 5, sigQ(9)))
	want := map[string]Decision{"b": wantServing(1), "c": wantServing(1)} // c: neutral = b's level
	if !reflect.DeepEqual(res.Decisions, want) {
		t.Fatalf("%v, want %v", res.Decisions, want)
	}
	if _, ok := p.st.replicas["a"]; ok || len(p.st.replicas) != 2 {
		t.Fatalf("state holds %d replicas, a forgotten=%v", len(p.st.replicas), !ok)
	}
	p.ids = []string{"a", "b"} // a comes back: it starts anew, not saturated
	res = p.step(10, goodObs("b", 10, sigQ(9)))
	if got := res.Decisions["a"]; got != wantServing(1) || res.Saturated != 0 {
		t.Fatalf("returning a: %v saturated=%d", got, res.Saturated)
	}

	for _, ids := range [][]string{nil, {}} {
		st, res := Step(cfg, State{}, ids, []Observation{goodObs("a", 0, sigQ(0))}, stepAt(0))
		if res.Decisions == nil || len(res.Decisions) != 0 || res.Fallback || res.Saturated != 0 || res.Stale != 0 {
			t.Errorf("empty stepPool: %+v", res)
		}
		if len(st.replicas) != 0 {
			t.Errorf("empty stepPool: state holds %d replicas", len(st.replicas))
		}
	}
}

// TestStepKeepsPreviousState: Step never writes into the State it is given.
func TestStepKeepsPreviousState(t *testing.T) {
	cfg := stepTestConfig()
	ids := []string{"a", "b"}
	st, _ := Step(cfg, State{}, ids, []Observation{goodObs("a", 0, sigQ(0)), goodObs("b", 0, sigQ(0))}, stepAt(0))
	obsA := []Observation{goodObs("a", 5, sigQ(10)), goodObs("b", 5, sigQ(9))}
	obsB := []Observation{goodObs("a", 5, sigQ(0)), failedObs("b", 5)}
	st1, res1 := Step(cfg, st, ids, obsA, stepAt(5))
	Step(cfg, st, ids, obsB, stepAt(5))
	Step(cfg, st1, ids, obsB, stepAt(100))
	st2, res2 := Step(cfg, st, ids, obsA, stepAt(5))
	if !reflect.DeepEqual(res1, res2) || !reflect.DeepEqual(st1, st2) {
		t.Fatalf("the same inputs gave different outputs after other calls:\n%+v\n%+v", res1, res2)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	if err := stepTestConfig().Validate(); err != nil {
		t.Fatalf("stepTestConfig: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   []string // substrings, one per expected error
	}{
		{"min zero", func(c *Config) { c.MinWeight = 0 }, []string{"MinWeight"}},
		{"min > max", func(c *Config) { c.MinWeight, c.MaxWeight = 5, 4 }, []string{"MaxWeight (4) must not be less than MinWeight (5)"}},
		{"levels < 1", func(c *Config) { c.Levels = 0 }, []string{"Levels (0) must be at least 1"}},
		{"levels > weights", func(c *Config) { c.Levels = 5 }, []string{"Levels (5) must not exceed the 4 integer weights"}},
		{"one level", func(c *Config) { c.Levels = 1 }, nil},
		{"smoothing 0", func(c *Config) { c.Smoothing = 0 }, []string{"Smoothing"}},
		{"smoothing > 1", func(c *Config) { c.Smoothing = 1.5 }, []string{"Smoothing"}},
		{"smoothing NaN", func(c *Config) { c.Smoothing = math.NaN() }, []string{"Smoothing"}},
		{"hysteresis negative", func(c *Config) { c.Hysteresis = -0.1 }, []string{"Hysteresis"}},
		{"hysteresis 1", func(c *Config) { c.Hysteresis = 1 }, []string{"Hysteresis"}},
		{"negative interval", func(c *Config) { c.MinChangeInterval = -time.Second }, []string{"MinChangeInterval"}},
		{"zero interval", func(c *Config) { c.MinChangeInterval = 0 }, nil},
		{"queue max 0", func(c *Config) { c.MaxQueueDepth = 0 }, []string{"MaxQueueDepth", "ResumeQueueDepth"}},
		{"queue max Inf", func(c *Config) { c.MaxQueueDepth = math.Inf(1) }, []string{"MaxQueueDepth"}},
		{"queue resume = max", func(c *Config) { c.ResumeQueueDepth = 10 }, []string{"ResumeQueueDepth"}},
		{"queue resume > max", func(c *Config) { c.ResumeQueueDepth = 11 }, []string{"ResumeQueueDepth"}},
		{"queue resume 0", func(c *Config) { c.ResumeQueueDepth = 0 }, []string{"ResumeQueueDepth"}},
		{"KV max > 1", func(c *Config) { c.MaxKVOccupancy = 1.1 }, []string{"MaxKVOccupancy"}},
		{"KV resume ≥ max", func(c *Config) { c.ResumeKVOccupancy = 0.9 }, []string{"ResumeKVOccupancy"}},
		{"preemption negative", func(c *Config) { c.MaxPreemptionRate = -1 }, []string{"MaxPreemptionRate"}},
		{"preemption 0", func(c *Config) { c.MaxPreemptionRate = 0 }, nil},
		{"negative hold", func(c *Config) { c.Hold = -1 }, []string{"Hold"}},
		{"relative queue off", func(c *Config) { c.RelativeQueue = 0 }, nil},
		{"relative queue 1", func(c *Config) { c.RelativeQueue = 1 }, nil},
		{"relative queue below 1", func(c *Config) { c.RelativeQueue = 0.5 }, []string{"RelativeQueue (0.5) must be 0 (off) or at least 1"}},
		{"relative queue negative", func(c *Config) { c.RelativeQueue = -2 }, []string{"RelativeQueue"}},
		{"relative queue Inf", func(c *Config) { c.RelativeQueue = math.Inf(1) }, []string{"RelativeQueue"}},
		{"relative queue NaN", func(c *Config) { c.RelativeQueue = math.NaN() }, []string{"RelativeQueue"}},
		{"KV margin off", func(c *Config) { c.RelativeKVMargin = 0 }, nil},
		{"KV margin 1", func(c *Config) { c.RelativeKVMargin = 1 }, []string{"RelativeKVMargin (1) must be in [0, 1)"}},
		{"KV margin negative", func(c *Config) { c.RelativeKVMargin = -0.1 }, []string{"RelativeKVMargin"}},
		{"KV margin NaN", func(c *Config) { c.RelativeKVMargin = math.NaN() }, []string{"RelativeKVMargin"}},
		{"fraction negative", func(c *Config) { c.MaxSaturatedFraction = -0.1 }, []string{"MaxSaturatedFraction"}},
		{"fraction > 1", func(c *Config) { c.MaxSaturatedFraction = 1.5 }, []string{"MaxSaturatedFraction"}},
		{"fraction 0", func(c *Config) { c.MaxSaturatedFraction = 0 }, nil},
		{"negative sustain", func(c *Config) { c.Sustain = -time.Second }, []string{"Sustain"}},
		{"zero sustain", func(c *Config) { c.Sustain = 0 }, nil},
		{"stale zero", func(c *Config) { c.StaleAfter = 0 }, []string{"StaleAfter"}},
		{"stale negative", func(c *Config) { c.StaleAfter = -time.Second }, []string{"StaleAfter"}},
		{"zero value", func(c *Config) { *c = Config{} }, []string{"MinWeight", "Levels", "Smoothing",
			"MaxQueueDepth", "ResumeQueueDepth", "MaxKVOccupancy", "ResumeKVOccupancy", "StaleAfter"}},
		{"all at once", func(c *Config) {
			c.MinWeight, c.MaxWeight, c.Smoothing, c.Hold, c.MaxSaturatedFraction = 3, 2, 2, -1, 2
		}, []string{"MaxWeight", "Smoothing", "Hold", "MaxSaturatedFraction"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := stepTestConfig()
			tc.mutate(&c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Errorf("%d errors, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for i, w := range tc.want {
				if i < len(lines) && !strings.Contains(lines[i], w) {
					t.Errorf("error %d is %q, want it to mention %q", i, lines[i], w)
				}
			}
		})
	}
}

// randomStepRun drives Step through a seeded random script: membership
// changes, random signals (some absent), counter resets, failed and
// out-of-order observations, irregular rounds. It checks the invariants at
// every step and returns every Result and State.
func randomStepRun(t *testing.T, cfg Config, seed uint64, rounds int) ([]Result, []State) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	universe := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	maybe := func(p float64, v float64) float64 {
		if rng.Float64() < p {
			return math.NaN()
		}
		return v
	}
	counters := map[string]float64{}
	var (
		st       State
		results  []Result
		states   []State
		ids      = universe[:4]
		sec      float64
		weight   = map[string]uint32{}
		changed  = map[string]time.Time{}
		allowed  = map[uint32]bool{}
		prevSeen = map[string]bool{}
	)
	for l := range cfg.Levels {
		allowed[cfg.levelWeight(l)] = true
	}
	for range rounds {
		prevNow := stepAt(sec)
		sec += 1 + 14*rng.Float64()
		if rng.Float64() < 0.05 { // a long outage of the whole scraper
			sec += 120 * rng.Float64()
		}
		now := stepAt(sec)
		if rng.Float64() < 0.05 {
			ids = nil
			for _, id := range universe {
				if rng.Float64() < 0.6 {
					ids = append(ids, id)
				}
			}
			rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		}
		var obs []Observation
		for _, id := range append(slices.Clone(ids), "stranger") {
			span := now.Sub(prevNow)
			k := rng.IntN(4)
			offs := make([]time.Duration, k)
			for i := range offs {
				offs[i] = time.Duration(rng.Int64N(int64(span)))
			}
			slices.Sort(offs)
			for _, off := range offs {
				when := prevNow.Add(off + 1)
				if rng.Float64() < 0.05 {
					when = when.Add(-time.Minute) // out of order
				}
				if rng.Float64() < 0.15 {
					obs = append(obs, Observation{ID: id, Time: when, Signals: absentSignals(), Err: errors.New("boom")})
					continue
				}
				switch r := rng.Float64(); {
				case r < 0.05:
					counters[id] = 0 // engine restart
				case r < 0.3:
					counters[id] += float64(rng.IntN(20))
				}
				s := absentSignals()
				s.QueueDepth = maybe(0.2, 12*rng.Float64())
				s.KVOccupancy = maybe(0.3, rng.Float64())
				s.Preemptions = maybe(0.2, counters[id])
				obs = append(obs, Observation{ID: id, Time: when, Signals: s})
			}
		}

		prev := st
		var res Result
		st, res = Step(cfg, st, ids, obs, now)
		results, states = append(results, res), append(states, st)

		n := len(slices.Compact(slices.Sorted(slices.Values(ids))))
		if len(res.Decisions) != n {
			t.Fatalf("t=%vs: %d decisions for %d ids", sec, len(res.Decisions), n)
		}
		limit := int(math.Floor(cfg.MaxSaturatedFraction*float64(n) + 1e-9))
		if res.Fallback != (res.Saturated > limit) {
			t.Fatalf("t=%vs: fallback=%v with %d saturated, limit %d", sec, res.Fallback, res.Saturated, limit)
		}
		var nStale, nOut int
		for _, id := range ids {
			d, ok := res.Decisions[id]
			if !ok {
				t.Fatalf("t=%vs: no decision for %s", sec, id)
			}
			if !allowed[d.Weight] || d.Weight < cfg.MinWeight || d.Weight > cfg.MaxWeight {
				t.Fatalf("t=%vs: %s weight %d is not a level weight", sec, id, d.Weight)
			}
			if d.Stale && d.Saturated {
				t.Fatalf("t=%vs: %s stale but saturated", sec, id)
			}
			if d.Saturated {
				nOut++
			}
			if d.Stale {
				nStale++
			}
			// A fresh replica that was already decided changes weight at
			// most once per MinChangeInterval (forced changes count).
			r := st.replicas[id]
			fresh := r.hasGood && now.Sub(r.lastGood) <= cfg.StaleAfter
			if w, ok := weight[id]; ok && prevSeen[id] && w != d.Weight {
				if _, had := prev.replicas[id]; had && fresh {
					if last, ok := changed[id]; ok && now.Sub(last) < cfg.MinChangeInterval {
						t.Fatalf("t=%vs: %s weight %d→%d only %v after the last change", sec, id, w, d.Weight, now.Sub(last))
					}
				}
				changed[id] = now
			}
			weight[id] = d.Weight
		}
		if res.Stale != nStale || (res.Fallback && nOut != 0) || (!res.Fallback && nOut != res.Saturated) {
			t.Fatalf("t=%vs: counts stale=%d/%d out=%d saturated=%d fallback=%v", sec, res.Stale, nStale, nOut, res.Saturated, res.Fallback)
		}
		clear(prevSeen)
		for _, id := range ids {
			prevSeen[id] = true
		}
		for id := range weight {
			if !prevSeen[id] { // removed: it starts anew
				delete(weight, id)
				delete(changed, id)
			}
		}
	}
	return results, states
}

func TestStepRandomProperties(t *testing.T) {
	configs := map[string]Config{"default": DefaultConfig(), "test": stepTestConfig()}
	c := DefaultConfig()
	c.Levels, c.MinWeight, c.MaxWeight, c.Hysteresis, c.MinChangeInterval = 1, 3, 3, 0, 0
	configs["one level"] = c
	c = DefaultConfig()
	c.Levels, c.MaxWeight, c.Hysteresis, c.Smoothing, c.MaxSaturatedFraction = 7, 100, 0, 1, 0
	configs["seven levels, no damping"] = c
	c = stepTestConfig()
	c.Hold, c.StaleAfter, c.MinChangeInterval = 0, time.Second, 10*time.Second
	configs["no hold, short staleness"] = c
	for name, cfg := range configs {
		// What the scripts exercised, so that the properties are not vacuous.
		var fallback, out, stale, moved bool
		for seed := range uint64(5) {
			t.Run(fmt.Sprintf("%s/%d", name, seed), func(t *testing.T) {
				res1, st1 := randomStepRun(t, cfg, seed, 400)
				res2, st2 := randomStepRun(t, cfg, seed, 400)
				if !reflect.DeepEqual(res1, res2) || !reflect.DeepEqual(st1, st2) {
					t.Fatal("two runs of the same script differ")
				}
				for i, r := range res1 {
					fallback = fallback || r.Fallback
					out = out || (r.Saturated > 0 && !r.Fallback)
					stale = stale || r.Stale > 0
					for id, d := range r.Decisions {
						if i > 0 {
							if p, ok := res1[i-1].Decisions[id]; ok && p.Weight != d.Weight && !p.Stale && !d.Stale {
								moved = true
							}
						}
					}
				}
			})
		}
		if name == "default" || name == "test" {
			if (!fallback && cfg.MaxSaturatedFraction < 1) || !out || !stale || !moved {
				t.Errorf("%s: scripts exercised fallback=%v taken-out=%v stale=%v moved=%v; want all", name, fallback, out, stale, moved)
			}
		}
	}
}

// TestStepInvalidConfig: Step does not panic on a Config that fails
// Validate (its decisions are unspecified).
func TestStepInvalidConfig(t *testing.T) {
	nan := math.NaN()
	for _, c := range []Config{
		{},
		{Weighting: Weighting{MinWeight: 5, MaxWeight: 1, Levels: -3, Smoothing: nan, Hysteresis: nan}, Escape: Escape{MaxSaturatedFraction: nan}},
		{Weighting: Weighting{MaxWeight: 4, Levels: 4, Smoothing: 7, Hysteresis: math.Inf(1)}, Escape: Escape{MaxQueueDepth: -1, MaxKVOccupancy: nan}, StaleAfter: -1},
	} {
		var st State
		for i := range 5 {
			sec := float64(i)
			st, _ = Step(c, st, []string{"a", "b"}, []Observation{goodObs("a", sec, sigQ(float64(3*i))), goodObs("b", sec, sigKV(0.5))}, stepAt(sec))
		}
	}
}

// With Relative, levels follow each replica's pressure against the pool's
// mean, whatever the pool's absolute load; saturated replicas do not count
// in the mean, and an idle pool stays at the top.
func TestStepRelative(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		name     string
		relative bool
		queues   []float64 // a..e; 10 saturates
		want     []uint32  // weights of a..d
	}{
		// Pressures 0.1, 0.2, 0.3, 0.6 and 0.3, mean 0.3: values 0.83,
		// 0.67, 0.5 and 0.
		{"relative", true, []float64{1, 2, 3, 6, 3}, []uint32{4, 4, 3, 1}},
		// Half the load, the same shares: the same weights.
		{"relative at half the load", true, []float64{0.5, 1, 1.5, 3, 1.5}, []uint32{4, 4, 3, 1}},
		// A saturated replica leaves the mean alone.
		{"relative with one saturated", true, []float64{1, 2, 3, 6, 10}, []uint32{4, 4, 3, 1}},
		{"idle pool", true, []float64{0, 0, 0, 0, 0}, []uint32{4, 4, 4, 4}},
		// Own headroom: 0.9..0.4, only d leaves the top band.
		{"absolute", false, []float64{1, 2, 3, 6, 3}, []uint32{4, 4, 4, 3}},
		{"absolute at half the load", false, []float64{0.5, 1, 1.5, 3, 1.5}, []uint32{4, 4, 4, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := stepTestConfig()
			cfg.Relative = tc.relative
			p := &stepPool{t: t, cfg: cfg, ids: ids}
			var obs []Observation
			for i, id := range ids {
				obs = append(obs, goodObs(id, 0, sigQ(tc.queues[i])))
			}
			res := p.step(0, obs...)
			for i, id := range ids[:4] {
				if got := res.Decisions[id]; got.Weight != tc.want[i] || got.Saturated {
					t.Errorf("%s: %v, want weight %d serving", id, got, tc.want[i])
				}
			}
			if sat := tc.queues[4] >= 10; res.Decisions["e"].Saturated != sat {
				t.Errorf("e: %v, saturated should be %t", res.Decisions["e"], sat)
			}
		})
	}
}

// TestStepDomains: relative weights measure each replica against its own
// weight domain. Two busy members of an exclusive group ("hot") sit at
// their domain's mean, the middle; measured against the whole pool they
// would be at the bottom and would lift everyone else's weight.
func TestStepDomains(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "g", "h"}
	queues := map[string]float64{"a": 1, "b": 2, "c": 3, "d": 6, "g": 8, "h": 8}
	var obs []Observation
	for _, id := range ids {
		obs = append(obs, goodObs(id, 0, sigQ(queues[id])))
	}
	cfg := stepTestConfig()
	cfg.Relative = true
	for _, tc := range []struct {
		name    string
		domains map[string]string
		want    map[string]uint32
	}{
		// Rest: pressures 0.1, 0.2, 0.3, 0.6 around 0.3 (values 0.83,
		// 0.67, 0.5, 0); group: 0.8 and 0.8 around 0.8 (0.5).
		{"group apart", map[string]string{"g": "hot", "h": "hot"},
			map[string]uint32{"a": 4, "b": 4, "c": 3, "d": 1, "g": 3, "h": 3}},
		// One pool, mean 0.47 (values 0.89, 0.79, 0.68, 0.36, 0.14):
		// the group near the bottom, c and d lifted.
		{"one domain", nil,
			map[string]uint32{"a": 4, "b": 4, "c": 4, "d": 2, "g": 2, "h": 2}},
		// A domain of one is always at its own mean; a, b and c are now
		// around 0.2 (values 0.75, 0.5, 0.25).
		{"singletons", map[string]string{"d": "d", "g": "g", "h": "h"},
			map[string]uint32{"a": 4, "b": 3, "c": 2, "d": 3, "g": 3, "h": 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, res := StepDomains(cfg, State{}, ids, tc.domains, obs, stepAt(0))
			for _, id := range ids {
				if got := res.Decisions[id]; got.Weight != tc.want[id] || got.Saturated {
					t.Errorf("%s: %v, want weight %d serving", id, got, tc.want[id])
				}
			}
		})
	}
	// Without Relative, domains change nothing.
	abs := stepTestConfig()
	_, plain := Step(abs, State{}, ids, obs, stepAt(0))
	_, dom := StepDomains(abs, State{}, ids, map[string]string{"g": "hot", "h": "hot"}, obs, stepAt(0))
	if !reflect.DeepEqual(plain, dom) {
		t.Errorf("absolute weights: with domains %v, without %v", dom.Decisions, plain.Decisions)
	}
}

// sigHits is an idle replica's page with prefix-cache counters (queries,
// hits), or with the engine's own rate where queries is NaN.
func sigHits(queries, hits, rate float64) *Signals {
	s := absentSignals()
	s.QueueDepth, s.PrefixQueries, s.PrefixHits, s.PrefixHitRate = 0, queries, hits, rate
	return &s
}

// A replica's decision carries its prefix-cache hit rate in sixteenths:
// the rate between scrapes of the counters, smoothed, held within a band
// until it is a quarter band past an edge; a counter reset is rebased;
// an engine's own rate stands in for missing counters; stale metrics
// carry none.
func TestStepCached(t *testing.T) {
	n := math.NaN()
	cached := func(c uint8) Decision { return Decision{Weight: 4, Cached: c} }
	runStepTicks(t, stepTestConfig(), []stepTick{
		{at: 0, sig: sigHits(1000, 900, n), want: cached(0)},          // a baseline, no rate yet
		{at: 10, sig: sigHits(2000, 1900, n), want: cached(15)},       // 1000/1000: capped at 15
		{at: 20, sig: sigHits(3000, 2400, n), want: cached(8)},        // 500/1000 = 8/16
		{at: 30, sig: sigHits(4000, 2975, n), want: cached(8)},        // 0.575 = 9.2/16: within a quarter band of 9
		{at: 40, sig: sigHits(5000, 3565, n), want: cached(9)},        // 0.59 = 9.44/16: past it
		{at: 50, sig: sigHits(5000, 3565, n), want: cached(9)},        // no lookups: no rate, the band stays
		{at: 60, sig: sigHits(100, 10, n), want: cached(9)},           // a restart: rebased
		{at: 70, sig: sigHits(1100, 260, n), want: cached(4)},         // 250/1000 = 4/16
		{at: 80, sig: sigHits(n, n, 0.75), want: cached(11)},          // the engine's own rate, 12/16: moving up, a quarter band short of 12
		{at: 90, sig: sigHits(n, n, 2), want: cached(15)},             // clamped to 1
		{at: 200, skip: true, want: Decision{Weight: 4, Stale: true}}, // stale: unknown
	})
	cfg := stepTestConfig()
	cfg.Smoothing = 0.5
	runStepTicks(t, cfg, []stepTick{
		{at: 0, sig: sigHits(0, 0, n), want: cached(0)},
		{at: 10, sig: sigHits(1000, 1000, n), want: cached(15)},
		{at: 20, sig: sigHits(2000, 1000, n), want: cached(8)}, // (1 + 0)/2
		{at: 30, sig: sigHits(3000, 1000, n), want: cached(4)}, // (0.5 + 0)/2
	})
}
