// Step: how a replica's signals become its weight and health.
//
// Every change of an endpoint's weight moves hash keys between replicas,
// and every moved key is a lost prefix-cache hit. So the weight follows
// load only coarsely and slowly, while the escape hatch for a replica that
// cannot take more work acts at once, or once that has lasted Sustain.
// Affinity is a preference with an escape hatch: a saturated replica
// leaves the hash table, keeps its identity, and gets its keys back when
// it recovers.
//
// # Free capacity
//
// From the signals present in one good observation (NaN means absent; a
// negative or infinite value is treated as absent too):
//
//	f = clamp(1 − max(QueueDepth/MaxQueueDepth, KVOccupancy/MaxKVOccupancy), 0, 1)
//
// f is the headroom left before the escape hatch triggers: it is 0 exactly
// when the replica reaches a saturation threshold, and the scarcer resource
// (scheduler queue or KV memory) binds. With only one of the two signals
// (TGI exports no KV occupancy) f uses that one; with neither, the
// observation still counts as fresh and still feeds the escape hatch, but
// the weight does not move. Running requests and preemptions do not enter
// f: the first has no engine-independent scale, the second is too bursty
// for a weight and is an escape-hatch signal instead.
//
// # Weight
//
// s is an exponentially weighted moving average of f, updated once per good
// observation: s ← Smoothing·f + (1 − Smoothing)·s, seeded with the first f.
// The unit interval is cut into Levels equal bands of width w = 1/Levels;
// level i covers [i·w, (i+1)·w) (the top one includes 1) and has weight
//
//	MinWeight + round(i · (MaxWeight − MinWeight) / (Levels − 1))
//
// (MaxWeight when Levels is 1). With h = Hysteresis·w, a replica at level L
// moves up to level(s − h) only when that is above L, and down to
// level(s + h) only when that is below L: s must cross a boundary by h
// before the weight follows, so noise of amplitude below h around a
// boundary never moves a key. A move may span several levels. It happens
// at most once per MinChangeInterval per replica (measured at the decision
// time now); a move the interval blocks is re-evaluated at every Step and
// happens as soon as it is allowed, if s still warrants it.
//
// A replica's first level is the neutral level (below), moved by the same
// rule once it has a capacity reading; the first weight a replica gets is
// not a change. Any later change of its weight, including the forced ones
// to and from the neutral weight, starts the MinChangeInterval again.
//
// # Relative weights
//
// With Relative, the value placed among the levels is not s but the
// replica's load against its peers': with pressure p = 1 − s and P the
// mean pressure of the fresh, unsaturated replicas of its weight domain,
// v = clamp(1 − p/(2P), 0, 1). A replica at its domain's mean pressure
// sits in the middle, one at twice the mean at the bottom, an idle one at
// the top; a domain without pressure keeps everyone at the top. Weights
// then follow shares of the load, not distance to saturation: a replica
// whose hash-table share draws few heavy keys gains weight even when the
// whole pool is lightly loaded, and one that draws many loses it. Levels,
// hysteresis and the minimum interval apply to v as they do to s.
//
// A weight domain is a set of replicas whose weights divide one hash
// table between them (StepDomains; Step puts the whole pool in one). A
// weight only shifts keys among the replicas of its table, so a replica
// is compared with those: a tenant group whose members serve only the
// group's table is a domain of its own, and a busy or idle group then no
// longer shifts the mean the rest of the pool is measured against.
//
// # Escape hatch
//
// Taking a replica out only helps when it is busier than the others: when
// the whole pool is busy, its keys move to cold caches elsewhere, which
// adds misses and no capacity. So the queue and KV signals are relative
// to the replica's peers, the other replicas of its weight domain whose
// metrics are fresh, each at its latest good reading in this Step
// (saturated peers included: their queues are real load). With Q and K
// the peers' mean queue depth and KV occupancy, a signal is hot at a
// threshold when
//
//	queue: QueueDepth ≥ threshold and QueueDepth ≥ RelativeQueue·Q
//	KV:    KVOccupancy ≥ threshold and KVOccupancy ≥ K + RelativeKVMargin
//
// A relative condition is off when its setting is 0, and holds when no
// peer reports the signal: a replica alone in its domain (or whose peers
// are all stale) is judged by the thresholds alone, as it would be
// without the relative conditions. The replica itself is left out of
// the mean, so that in a small pool a hot replica is compared with the
// others' load, not with a mean it pulls up.
//
// A good observation is saturating when the replica's queue is hot at
// MaxQueueDepth, or its KV occupancy at MaxKVOccupancy, or its preemption
// rate exceeds MaxPreemptionRate. The replica saturates (no smoothing:
// the point is to shed load fast) at the first saturating observation at
// least Sustain after the first of an unbroken run of saturating ones; an
// observation that is not saturating breaks the run, a failed one does
// not. With Sustain 0 the first saturating observation saturates. A burst
// of long prompts lifts a replica above its peers for a scrape or two;
// taking it out then moves its keys to cold caches and back for nothing,
// while a replica that is truly stuck stays hot past Sustain and leaves.
// Preemptions stay absolute: an engine preempts when
// the requests it already runs outgrow its own KV cache (vLLM's
// scheduler evicts a running request, whose prefill is then computed
// again), which is lost work on that replica whatever the others do; a
// pool where all replicas preempt falls back to pure affinity (below).
// The rate is Δcount/Δt of the Preemptions counter between two
// consecutive good observations that both carry it. A counter that
// decreases was reset by an engine restart: that is neither preemption
// nor an error, the counter is just rebased (the pair counts as "no
// preemption").
//
// A saturated replica is "calm" at a good observation whose queue is not
// hot at ResumeQueueDepth, whose KV occupancy is not hot at
// ResumeKVOccupancy (absent signals do not object), and with no increase
// of the preemption counter: it returns once it is below the resume
// thresholds or no longer stands out from its peers. The hysteresis is
// the resume thresholds' and the hold's. It recovers at the
// first calm observation at least Hold after the first observation of an
// unbroken run of calm ones; any observation that is not calm (even below
// the saturation thresholds) breaks the run, and the hold starts again.
// Hold is measured between observations, not against now: recovery needs
// evidence, and a replica whose scrapes fail stays out until its metrics go
// stale (below).
//
// While saturated (including the hold), a replica's smoothed value and
// level are frozen and its Decision carries that frozen weight: it returns
// with exactly the weight it left with, so the hash table it returns to is
// the one it left, and its keys come back to it instead of being shuffled.
//
// # Never swamp the rest
//
// Let n = len(ids) (distinct ids) and limit = floor(MaxSaturatedFraction·n).
// When more than limit replicas are saturated, Result.Fallback is set and
// no replica is Saturated (pure affinity): shedding would only overload
// the others. Result.Saturated still counts them. When the count drops to
// limit or below, the saturated ones leave the table again. A pool of one
// replica (limit 0 for any fraction below 1) therefore never loses its only
// replica.
//
// # Stale or broken metrics
//
// A failed observation (Err set) changes nothing: it never saturates a
// replica nor moves its weight. The last good signals keep governing the
// replica while now − (time of last good observation) ≤ StaleAfter. After
// that the replica is stale: not saturated (stale metrics never keep a replica
// out), Decision.Stale set, and the neutral weight. Going stale also drops
// its saturation and hold, its smoothed value and its preemption baseline,
// and its level becomes the neutral level. When good observations resume,
// the replica continues from there: its level is the neutral one it has
// been serving with (no jump back to an old weight), the smoothed value is
// seeded from the first fresh reading, the preemption rate is rebased, and
// saturation is judged afresh (at once, if the first reading saturates).
//
// The neutral level is the lower median of the current levels of the
// pool's fresh replicas (saturated ones included, at their frozen level),
// or the top level when none is fresh. A replica whose metrics are missing
// takes a typical share, not a privileged one; at a cold start every
// replica begins at full weight and only moves down once it reports load.
//
// A replica with no good observation yet gets the neutral weight and is
// not saturated; it is reported Stale once StaleAfter has passed since the Step
// that first listed it.
//
// Good observations not after the last good one already folded (out of
// order, or duplicates) are ignored, as are observations of ids not in
// ids. Replicas no longer in ids are forgotten; if one comes back, it
// starts anew.
//
// # Determinism
//
// Step uses no clock but now and no randomness; it walks ids in sorted
// order and observations in the given order, so the same inputs give the
// same outputs.

package weights

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// State is Step's memory between calls; the zero value is a valid start.
// Step never modifies a State it was given, so a caller may keep an old
// one (to retry, or to compare).
type State struct {
	replicas map[string]memo
}

// memo is one replica's memory. It holds no pointers, so copying it
// copies it all.
type memo struct {
	firstSeen time.Time // now of the Step that first listed the id

	hasGood  bool
	lastGood time.Time // time of the last good observation folded
	// Usable queue depth and KV occupancy of that observation, for its
	// peers' means.
	q, kv     float64
	qok, kvok bool

	// Preemption counter baseline for the rate.
	hasPre   bool
	preCount float64
	preTime  time.Time

	hasEWMA bool
	ewma    float64 // smoothed free capacity

	// Prefix-cache counter baselines for the hit rate, the smoothed
	// rate, and its band in sixteenths (cached).
	hasHits    bool
	hitQ, hitH float64
	hasHitRate bool
	hitRate    float64
	cached     uint8

	hasLevel   bool
	level      int
	changed    bool // the weight has changed at least once
	lastChange time.Time

	saturated bool
	calm      bool      // an unbroken run of calm observations is under way
	calmSince time.Time // first observation of that run
	hot       bool      // an unbroken run of saturating observations is under way
	hotSince  time.Time // first observation of that run
}

// Result is one step's outcome for a pool.
type Result struct {
	// Decisions has one entry per id in ids.
	Decisions map[string]Decision
	// Fallback is set when more than MaxSaturatedFraction of the pool is
	// saturated: then no replica is Saturated (pure affinity) and the
	// caller logs it and sets a metric.
	Fallback bool
	// Saturated counts the replicas saturated by their signals, whether or
	// not they are taken out (so also in fallback).
	Saturated int
	// Stale counts the replicas with Decision.Stale set.
	Stale int
}

// Step folds this round's observations into the state and decides every
// replica in ids, the pool's current members, at time now.
//
// obs may hold zero or more observations per replica, in time order, good
// or failed. Replicas no longer in ids are forgotten; a replica with no
// observation yet gets the neutral weight and is not saturated. See the comment
// at the top of step.go for the formulas: free capacity, smoothed and
// quantised into levels with hysteresis and a minimum interval between
// changes; immediate saturation with a hold before recovery; the fallback
// to pure affinity when too much of the pool is saturated; stale metrics.
//
// Step expects a Config that passes Validate. Under one that does not, it
// forgets prev and leaves every replica at weight 1 and in the hash table,
// as if the pool had no metric-driven weights.
func Step(cfg Config, prev State, ids []string, obs []Observation, now time.Time) (State, Result) {
	return StepDomains(cfg, prev, ids, nil, obs, now)
}

// StepDomains is Step with the replicas in weight domains: domains maps
// a replica's id to its domain's name, and ids it does not list (all of
// them, when it is nil) are in the domain "". Domains matter only to
// relative weights (Config.Relative): each replica is measured against
// the mean pressure of its own domain.
func StepDomains(cfg Config, prev State, ids []string, domains map[string]string, obs []Observation, now time.Time) (State, Result) {
	members := slices.Clone(ids)
	slices.Sort(members)
	members = slices.Compact(members)
	if cfg.Validate() != nil {
		res := Result{Decisions: make(map[string]Decision, len(members))}
		for _, id := range members {
			res.Decisions[id] = Decision{Weight: 1}
		}
		return State{}, res
	}

	next := State{replicas: make(map[string]memo, len(members))}
	for _, id := range members {
		r, ok := prev.replicas[id]
		if !ok {
			r = memo{firstSeen: now}
		}
		next.replicas[id] = r // a copy: prev is never written
	}
	peers := peerLoads(&cfg, next, members, domains, obs, now)
	for i := range obs {
		o := &obs[i]
		if o.Err != nil {
			continue // a failed scrape tells nothing about load
		}
		r, ok := next.replicas[o.ID]
		if !ok {
			continue
		}
		r.fold(&cfg, o.Time, &o.Signals, peers[o.ID])
		next.replicas[o.ID] = r
	}

	fresh := make([]bool, len(members))
	for i, id := range members {
		r := next.replicas[id]
		fresh[i] = r.hasGood && now.Sub(r.lastGood) <= cfg.StaleAfter
	}
	value := levelValue(&cfg, next, members, fresh, domains)
	prevLevel := make([]int, len(members))
	hadLevel := make([]bool, len(members))
	var levels []int // current levels of fresh replicas, for the neutral level
	for i, id := range members {
		r := next.replicas[id]
		prevLevel[i], hadLevel[i] = r.level, r.hasLevel
		switch {
		case fresh[i]:
			if r.hasLevel && r.hasEWMA && !r.saturated &&
				(!r.changed || now.Sub(r.lastChange) >= cfg.MinChangeInterval) {
				r.level = moveLevel(&cfg, r.level, value(id, r))
			}
			if r.hasLevel {
				levels = append(levels, r.level)
			}
		case r.hasGood:
			// Stale: forget what the old metrics said, so that they never
			// keep the replica out and resumed metrics start afresh.
			r.saturated, r.calm, r.hot = false, false, false
			r.hasEWMA, r.hasPre = false, false
		}
		next.replicas[id] = r
	}
	neutral := cfg.Levels - 1
	if len(levels) > 0 {
		slices.Sort(levels)
		neutral = levels[(len(levels)-1)/2]
	}

	res := Result{Decisions: make(map[string]Decision, len(members))}
	for i, id := range members {
		r := next.replicas[id]
		switch {
		case !fresh[i]:
			r.level = neutral
		case !r.hasLevel:
			// First good observation in the Step that first listed it.
			r.level = neutral
			if r.hasEWMA && !r.saturated {
				r.level = moveLevel(&cfg, r.level, value(id, r))
			}
		}
		if hadLevel[i] && r.level != prevLevel[i] {
			r.changed, r.lastChange = true, now
		}
		r.hasLevel = true
		next.replicas[id] = r

		d := Decision{Weight: cfg.levelWeight(r.level)}
		if fresh[i] && r.hasHitRate {
			d.Cached = r.cached
		}
		if !fresh[i] {
			d.Stale = r.hasGood || now.Sub(r.firstSeen) > cfg.StaleAfter
		}
		if d.Stale {
			res.Stale++
		}
		if fresh[i] && r.saturated {
			d.Saturated = true
			res.Saturated++
		}
		res.Decisions[id] = d
	}

	// The small epsilon keeps e.g. 0.29×100 at 29, not 28.999….
	limit := int(math.Floor(cfg.MaxSaturatedFraction*float64(len(members)) + 1e-9))
	if res.Saturated > limit {
		res.Fallback = true
		for _, id := range members {
			d := res.Decisions[id]
			d.Saturated = false
			res.Decisions[id] = d
		}
	}
	return next, res
}

// levelValue returns what places a replica among the levels: its smoothed
// free capacity s, or with Relative, its load against its domain's: with
// pressure p = 1 − s and P the mean pressure of the fresh replicas of its
// domain that are not saturated,
//
//	v = clamp(1 − p / (2P), 0, 1)
//
// so a replica at its domain's mean pressure sits in the middle (v = 0.5),
// one at twice the mean or more at the bottom, an idle one at the top. A
// domain with no pressure (P = 0) keeps every replica at the top.
func levelValue(cfg *Config, st State, members []string, fresh []bool, domains map[string]string) func(id string, r memo) float64 {
	if !cfg.Relative {
		return func(_ string, r memo) float64 { return r.ewma }
	}
	type total struct {
		sum float64
		n   int
	}
	totals := map[string]total{}
	for i, id := range members {
		if r := st.replicas[id]; fresh[i] && r.hasEWMA && !r.saturated {
			t := totals[domains[id]]
			t.sum += 1 - r.ewma
			t.n++
			totals[domains[id]] = t
		}
	}
	return func(id string, r memo) float64 {
		t := totals[domains[id]]
		if t.n == 0 || t.sum/float64(t.n) <= 1e-9 {
			return 1
		}
		return min(max(1-(1-r.ewma)/(2*t.sum/float64(t.n)), 0), 1)
	}
}

// peerLoad is the mean of a replica's peers' latest queue depths and KV
// occupancies; qok (kvok) is false when no peer reports the signal.
type peerLoad struct {
	q, kv     float64
	qok, kvok bool
}

// peerLoads returns each member's peerLoad: the means over the other
// members of its domain whose metrics are fresh at now, each at its
// latest good reading once obs are folded (the order rule is fold's).
// Saturated peers count: their queues are real load.
func peerLoads(cfg *Config, st State, members []string, domains map[string]string, obs []Observation, now time.Time) map[string]peerLoad {
	if cfg.RelativeQueue == 0 && cfg.RelativeKVMargin == 0 {
		return nil
	}
	latest := make(map[string]memo, len(members))
	for _, id := range members {
		latest[id] = st.replicas[id]
	}
	for i := range obs {
		o := &obs[i]
		r, ok := latest[o.ID]
		if !ok || o.Err != nil || r.hasGood && !o.Time.After(r.lastGood) {
			continue
		}
		r.hasGood, r.lastGood = true, o.Time
		r.q, r.qok = usable(o.Signals.QueueDepth)
		r.kv, r.kvok = usable(o.Signals.KVOccupancy)
		latest[o.ID] = r
	}
	type total struct {
		q, kv   float64
		qn, kvn int
	}
	fresh := func(r memo) bool { return r.hasGood && now.Sub(r.lastGood) <= cfg.StaleAfter }
	totals := map[string]total{}
	for _, id := range members {
		if r := latest[id]; fresh(r) {
			t := totals[domains[id]]
			if r.qok {
				t.q, t.qn = t.q+r.q, t.qn+1
			}
			if r.kvok {
				t.kv, t.kvn = t.kv+r.kv, t.kvn+1
			}
			totals[domains[id]] = t
		}
	}
	out := make(map[string]peerLoad, len(members))
	for _, id := range members {
		t, r := totals[domains[id]], latest[id]
		if fresh(r) { // leave itself out
			if r.qok {
				t.q, t.qn = t.q-r.q, t.qn-1
			}
			if r.kvok {
				t.kv, t.kvn = t.kv-r.kv, t.kvn-1
			}
		}
		var p peerLoad
		if t.qn > 0 {
			p.q, p.qok = max(t.q/float64(t.qn), 0), true
		}
		if t.kvn > 0 {
			p.kv, p.kvok = max(t.kv/float64(t.kvn), 0), true
		}
		out[id] = p
	}
	return out
}

// fold applies one good observation taken at t, judged against the
// replica's peers.
func (r *memo) fold(cfg *Config, t time.Time, s *Signals, peer peerLoad) {
	if r.hasGood && !t.After(r.lastGood) {
		return // out of order or duplicate
	}
	r.hasGood, r.lastGood = true, t

	q, qok := usable(s.QueueDepth)
	kv, kvok := usable(s.KVOccupancy)
	r.q, r.qok, r.kv, r.kvok = q, qok, kv, kvok

	r.foldHits(cfg, s)

	// Preemptions: rate between consecutive good observations carrying
	// the counter; a decrease is a reset, rebased without counting.
	rate, preempted := 0.0, false
	if c, ok := usable(s.Preemptions); ok {
		if r.hasPre {
			if d := c - r.preCount; d > 0 {
				preempted = true
				rate = d / t.Sub(r.preTime).Seconds()
			}
		}
		r.hasPre, r.preCount, r.preTime = true, c, t
	} else {
		r.hasPre = false
	}

	// A signal is hot at a threshold when it reaches it and, if relative
	// conditions are on and there are peers to compare with, stands out
	// from the peers' mean. A replica with no fresh peer is judged by
	// the thresholds alone.
	// The epsilon keeps e.g. 0.85 + 0.1 from missing 0.95.
	hotQ := func(limit float64) bool {
		return qok && q >= limit &&
			(cfg.RelativeQueue == 0 || !peer.qok || q >= cfg.RelativeQueue*peer.q-1e-9)
	}
	hotKV := func(limit float64) bool {
		return kvok && kv >= limit &&
			(cfg.RelativeKVMargin == 0 || !peer.kvok || kv >= peer.kv+cfg.RelativeKVMargin-1e-9)
	}
	saturating := hotQ(cfg.MaxQueueDepth) || hotKV(cfg.MaxKVOccupancy) ||
		(preempted && rate > cfg.MaxPreemptionRate)
	calm := !hotQ(cfg.ResumeQueueDepth) && !hotKV(cfg.ResumeKVOccupancy) && !preempted
	switch {
	case saturating && !r.saturated:
		// It leaves only once the run has lasted Sustain: a burst that
		// ends sooner would move keys to cold caches for nothing.
		if !r.hot {
			r.hot, r.hotSince = true, t
		}
		if t.Sub(r.hotSince) >= cfg.Sustain {
			r.saturated, r.calm, r.hot = true, false, false
		}
	case saturating:
		r.calm = false
	case r.saturated && calm:
		if !r.calm {
			r.calm, r.calmSince = true, t
		}
		if t.Sub(r.calmSince) >= cfg.Hold {
			r.saturated, r.calm = false, false
		}
	case r.saturated:
		r.calm = false // a dip back above the resume thresholds
	}
	if !saturating {
		r.hot = false
	}
	if r.saturated {
		return // weight frozen while out
	}

	load, known := 0.0, false
	if qok {
		load, known = q/cfg.MaxQueueDepth, true
	}
	if kvok {
		load, known = max(load, kv/cfg.MaxKVOccupancy), true
	}
	f := 1 - load
	if !known || math.IsNaN(f) {
		return
	}
	f = min(max(f, 0), 1)
	if r.hasEWMA {
		r.ewma = cfg.Smoothing*f + (1-cfg.Smoothing)*r.ewma
	} else {
		r.ewma, r.hasEWMA = f, true
	}
}

// foldHits folds an observation's prefix-cache counters (the rate of hits
// over lookups since the previous one), or else the engine's own hit
// rate, into the smoothed hit rate and its band. A counter that
// decreased restarted: rebased without a rate.
func (r *memo) foldHits(cfg *Config, s *Signals) {
	rate, ok := math.NaN(), false
	q, qok := usable(s.PrefixQueries)
	h, hok := usable(s.PrefixHits)
	switch {
	case qok && hok:
		if r.hasHits && q > r.hitQ && h >= r.hitH {
			rate, ok = min((h-r.hitH)/(q-r.hitQ), 1), true
		}
		r.hasHits, r.hitQ, r.hitH = true, q, h
	default:
		r.hasHits = false
		if v, vok := usable(s.PrefixHitRate); vok {
			rate, ok = min(v, 1), true
		}
	}
	if !ok {
		return
	}
	if r.hasHitRate {
		r.hitRate = cfg.Smoothing*rate + (1-cfg.Smoothing)*r.hitRate
	} else {
		r.hitRate, r.hasHitRate = rate, true
	}
	r.cached = cachedBand(r.cached, r.hitRate)
}

// cachedBand is the band in sixteenths (at most CachedMax) of hit rate x,
// moving from band c only when x is a quarter band past its edge, so that
// a rate near an edge does not push a table at every scrape.
func cachedBand(c uint8, x float64) uint8 {
	const margin = 0.25
	b := func(v float64) uint8 {
		return uint8(min(max(math.Floor(v*16), 0), CachedMax))
	}
	if up := b(x - margin/16); up > c {
		return up
	}
	if down := b(x + margin/16); down < c {
		return down
	}
	return c
}

// usable reports whether a signal value is usable: not NaN (absent), not
// infinite, not negative.
func usable(v float64) (float64, bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, false
	}
	return v, true
}

// moveLevel applies the hysteresis rule to a replica at level l with smoothed
// free capacity s.
func moveLevel(cfg *Config, l int, s float64) int {
	h := cfg.Hysteresis / float64(cfg.Levels)
	if up := bandOf(cfg.Levels, s-h); up > l {
		return up
	}
	if down := bandOf(cfg.Levels, s+h); down < l {
		return down
	}
	return l
}

// bandOf is the level whose band holds x, without hysteresis.
func bandOf(levels int, x float64) int {
	l := math.Floor(x * float64(levels))
	if !(l >= 0) { // also NaN
		return 0
	}
	if l > float64(levels-1) {
		return levels - 1
	}
	return int(l)
}

// levelWeight is the integer weight of level l: Levels evenly spaced values
// from MinWeight to MaxWeight, rounded half up.
func (c *Config) levelWeight(l int) uint32 {
	if c.Levels <= 1 {
		return c.MaxWeight
	}
	l = min(max(l, 0), c.Levels-1)
	span, steps := uint64(c.MaxWeight-c.MinWeight), uint64(c.Levels-1)
	return c.MinWeight + uint32((uint64(l)*span+steps/2)/steps)
}

// FieldError is a setting of a Config that is out of its range or does
// not fit another. Path names the setting as a policy file writes it
// ("max", "resume_queue_depth", "stale_after"), and With the settings it
// was compared with, if any; Msg, the error's text, names the Config's
// fields.
type FieldError struct {
	Path string
	With []string
	Msg  string
}

func (e *FieldError) Error() string { return e.Msg }

// FieldErrors returns every *FieldError in err (as Validate returns
// them), in order.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *FieldError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	return out
}

// fieldErrors collects a Validate's errors.
type fieldErrors []error

func (f *fieldErrors) add(path string, with []string, format string, args ...any) {
	*f = append(*f, &FieldError{Path: path, With: with, Msg: fmt.Sprintf(format, args...)})
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Validate reports every inconsistent value of c at once, joined with
// errors.Join, each a *FieldError; nil means c is usable.
func (c Config) Validate() error {
	var errs fieldErrors
	if c.StaleAfter <= 0 {
		// Zero would make every replica stale between two scrapes.
		errs.add("stale_after", nil, "StaleAfter (%v) must be positive", c.StaleAfter)
	}
	return errors.Join(c.Weighting.Validate(), c.Escape.Validate(), errors.Join(errs...))
}

// Validate reports every inconsistent value of w, as Config.Validate.
func (w Weighting) Validate() error {
	var errs fieldErrors
	if w.MinWeight < 1 {
		errs.add("min", nil, "MinWeight must be at least 1 (Envoy rejects a zero endpoint weight)")
	}
	if w.MaxWeight < w.MinWeight {
		errs.add("max", []string{"min"}, "MaxWeight (%d) must not be less than MinWeight (%d)", w.MaxWeight, w.MinWeight)
	}
	if w.Levels < 1 {
		errs.add("levels", nil, "Levels (%d) must be at least 1", w.Levels)
	} else if w.MaxWeight >= w.MinWeight && uint64(w.Levels) > uint64(w.MaxWeight-w.MinWeight)+1 {
		// Two levels with one integer weight would be indistinguishable.
		errs.add("levels", []string{"min", "max"}, "Levels (%d) must not exceed the %d integer weights from MinWeight (%d) to MaxWeight (%d)",
			w.Levels, uint64(w.MaxWeight-w.MinWeight)+1, w.MinWeight, w.MaxWeight)
	}
	if !(w.Smoothing > 0 && w.Smoothing <= 1) {
		errs.add("smoothing", nil, "Smoothing (%v) must be in (0, 1]", w.Smoothing)
	}
	if !(w.Hysteresis >= 0 && w.Hysteresis < 1) {
		// At 1 or more the top level could never be reached.
		errs.add("hysteresis", nil, "Hysteresis (%v) must be in [0, 1)", w.Hysteresis)
	}
	if w.MinChangeInterval < 0 {
		errs.add("min_interval", nil, "MinChangeInterval (%v) must not be negative", w.MinChangeInterval)
	}
	return errors.Join(errs...)
}

// Validate reports every inconsistent value of e, as Config.Validate.
func (e Escape) Validate() error {
	var errs fieldErrors
	if !(e.MaxQueueDepth > 0 && finite(e.MaxQueueDepth)) {
		errs.add("max_queue_depth", nil, "MaxQueueDepth (%v) must be positive and finite", e.MaxQueueDepth)
	}
	// A resume value out of its own range is not compared with its
	// maximum: that error is the resume value's alone.
	switch msg := "ResumeQueueDepth (%v) must be positive and less than MaxQueueDepth (%v)"; {
	case !(e.ResumeQueueDepth > 0 && finite(e.ResumeQueueDepth)):
		errs.add("resume_queue_depth", nil, msg, e.ResumeQueueDepth, e.MaxQueueDepth)
	case !(e.ResumeQueueDepth < e.MaxQueueDepth):
		errs.add("resume_queue_depth", []string{"max_queue_depth"}, msg, e.ResumeQueueDepth, e.MaxQueueDepth)
	}
	if !(e.MaxKVOccupancy > 0 && e.MaxKVOccupancy <= 1) {
		errs.add("max_kv_occupancy", nil, "MaxKVOccupancy (%v) must be in (0, 1]", e.MaxKVOccupancy)
	}
	switch msg := "ResumeKVOccupancy (%v) must be positive and less than MaxKVOccupancy (%v)"; {
	case !(e.ResumeKVOccupancy > 0 && e.ResumeKVOccupancy < 1):
		errs.add("resume_kv_occupancy", nil, msg, e.ResumeKVOccupancy, e.MaxKVOccupancy)
	case !(e.ResumeKVOccupancy < e.MaxKVOccupancy):
		errs.add("resume_kv_occupancy", []string{"max_kv_occupancy"}, msg, e.ResumeKVOccupancy, e.MaxKVOccupancy)
	}
	if !(e.MaxPreemptionRate >= 0 && finite(e.MaxPreemptionRate)) {
		errs.add("max_preemption_rate", nil, "MaxPreemptionRate (%v) must be non-negative and finite", e.MaxPreemptionRate)
	}
	if !(e.RelativeQueue == 0 || e.RelativeQueue >= 1 && finite(e.RelativeQueue)) {
		// Below 1 a replica under its peers' mean could be "hotter"
		// than them: 0 is the one value that means off.
		errs.add("relative_queue", nil, "RelativeQueue (%v) must be 0 (off) or at least 1 and finite", e.RelativeQueue)
	}
	if !(e.RelativeKVMargin >= 0 && e.RelativeKVMargin < 1) {
		errs.add("relative_kv_margin", nil, "RelativeKVMargin (%v) must be in [0, 1)", e.RelativeKVMargin)
	}
	if e.Hold < 0 {
		errs.add("hold", nil, "Hold (%v) must not be negative", e.Hold)
	}
	if e.Sustain < 0 {
		errs.add("sustain", nil, "Sustain (%v) must not be negative", e.Sustain)
	}
	if !(e.MaxSaturatedFraction >= 0 && e.MaxSaturatedFraction <= 1) {
		errs.add("max_saturated_fraction", nil, "MaxSaturatedFraction (%v) must be in [0, 1]", e.MaxSaturatedFraction)
	}
	return errors.Join(errs...)
}
