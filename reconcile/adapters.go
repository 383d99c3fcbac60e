package reconcile

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/hotkeys"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/weights"
	"github.com/kvxds/kvxds/xds/accesslog"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// LoRA adapters: every instance counts the requests the Envoys connected
// to it log for each pool placing adapters, per adapter, in a bounded
// decaying sketch (hotkeys.Sketch, keyed by adapter name, base-model
// requests under a key of their own so that shares are of all the pool's
// requests). The leader decides each pool's placement every Interval
// (decideAdapters) from its sketch or, when no logs came (gRPC-only
// fleets), from the adapters its engines report in flight, publishes it
// with its other decisions, and followers serve it; WithAdapters puts it
// in the model, where the plan turns it into members. Fail static: with
// no signal the placement stays.

// Placements are the pools' adapter placements, by pool.
type Placements = map[string]fleet.AdapterPlacement

// Keys of an adapter sketch: an adapter's requests and the pool's other
// requests (base model, or no adapter named).
const (
	adapterKey = 0
	baseKey    = 1
	baseValue  = "-"
)

// Tuning of the placement decision.
const (
	// adapterHeadroom sizes an adapter's replicas from its share of the
	// pool's requests: ceil(share × healthy × headroom), where headroom is
	// adapterHeadroom for each of a replica's slots for placed adapters
	// (a quarter of its max_lora, fleet.TailSlots), at most 1. With one
	// such slot (max_lora 4 to 7) no member takes more than 4/3 of its
	// share of the pool, the balance a pool should keep: a member per
	// share would keep more of the fleet's few slots busy with the same
	// adapter, and the requests of adapters running nowhere would wait
	// longer for one. With two or more (max_lora 8 and up) slots are not
	// what requests wait for, their queues are, and each member takes at
	// most its share. Measured on the multi-LoRA benchmark over five
	// minutes (docs/benchmarks/workloads.md), seeds 1–3, at max_lora 4:
	// balance 1.16–1.27 against 1.75–1.88 at 0.5, at 0.67–0.79× llm-d's
	// client TTFT p95 against 0.52–0.66×; at max_lora 8 (headroom 1),
	// client TTFT p95 135–152 ms against 140–154 ms at 0.5, balance
	// 1.37–1.83 against 1.70–2.41.
	adapterHeadroom = 0.75
	// minAdapterShare is the share of the pool's logged requests below
	// which a learned adapter is not placed (it uses the pool's routes).
	minAdapterShare = 0.001
	// keepAdapterShare is the share below which a placed adapter leaves.
	// A rare adapter's share rises with each request and decays between
	// them: leaving at minAdapterShare it came and went every few
	// requests, its conversations moving between its replica and the
	// pool's hash each time (a cold cache and a swap-in). On the
	// multi-LoRA benchmark (docs/benchmarks/workloads.md) placement moves
	// for demand fell from 142–179 to 99–106 in five minutes, at the
	// same or a shorter tail.
	keepAdapterShare = minAdapterShare / 10
	// shareBand is how far an adapter's share must move from the share
	// it was last decided with (a factor either way) before the new one
	// is decided: placement takes free slots in order of decided share,
	// and shares that swap order on noise would move adapters between
	// slots at every decision.
	shareBand = math.Sqrt2
	// shrinkSlack is the headroom an adapter's need must leave before its
	// placement shrinks to it (decidePool's shrinkTo); growing is at once.
	shrinkSlack = 1.25
	// minInFlight is the smoothed replicas an adapter the engines report
	// must keep to stay placed (engineNeed): a single report is forgotten
	// after about three half-lives.
	minInFlight = 0.1
)

// Causes of a placement move, as kvxds_adapter_moves_total labels them.
const (
	MoveDemand     = status.MoveDemand
	MoveMembership = status.MoveMembership
	MoveCapacity   = status.MoveCapacity
)

var moveCauses = status.MoveCauses

// adapterState is what an instance knows of its pools' adapters.
type adapterState struct {
	mu    sync.Mutex
	pools map[string]*adapterPool
	// placed are the placements this instance decided (or, after
	// gaining the lead, its predecessor's).
	placed decided[fleet.AdapterPlacement]
	// below is, by pool and adapter, since when its need has been below
	// half of its replicas (shrinking waits a full interval).
	below map[string]map[string]time.Time
	// inFlight is, by pool and adapter, the replicas the engines report
	// it in flight on, smoothed over the half-life (engineNeed), with
	// when it was last updated.
	inFlight   map[string]map[string]float64
	inFlightAt map[string]time.Time
	// served are the members each placed adapter had at the last push,
	// by pool and adapter, with the adapter's replicas and the pool's
	// replicas and health then, to tell what moved it.
	served map[string]servedAdapters
	seen   map[string]*adapterSeen

	moves    *prometheus.CounterVec
	rejected *prometheus.CounterVec
	requests *prometheus.CounterVec
}

type servedAdapters struct {
	members  map[string][]string
	replicas map[string]int
	fleet    []string // identity and health of every replica
	slots    map[string]int
}

type adapterSeen struct {
	requests, adapters uint64
	rejected           map[string]uint64
	moves              map[string]uint64
}

// adapterPool is one pool placing adapters, as of the last push.
type adapterPool struct {
	settings fleet.Adapters
	header   string
	keys     []string // the key chain's headers as Envoy logs them
	healthy  int
	sketch   *hotkeys.Sketch
	// observed counts the requests logged since the last decision.
	observed uint64
}

func newAdapterState(reg prometheus.Registerer) *adapterState {
	f := promauto.With(reg)
	return &adapterState{
		pools: map[string]*adapterPool{}, placed: newDecided(placementKind),
		below: map[string]map[string]time.Time{}, inFlight: map[string]map[string]float64{}, inFlightAt: map[string]time.Time{}, served: map[string]servedAdapters{}, seen: map[string]*adapterSeen{},
		moves: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_adapter_moves_total",
			Help: "Placed LoRA adapters whose member replicas changed at a push, by pool and cause: demand (its replicas were decided anew, or it was placed or removed), membership (a replica joined, left or changed health), capacity (a replica's adapter slots, or a busier adapter, took its place).",
		}, []string{"pool", "cause"}),
		rejected: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_adapter_rejected_total",
			Help: "Logged requests whose body's adapter field named no adapter, by pool and the Lua filter's reason (not_string, empty, too_long, not_printable).",
		}, []string{"pool", "reason"}),
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_adapter_requests_logged_total",
			Help: "Logged requests of pools placing adapters, by pool and whether they named an adapter (adapter) or not (base).",
		}, []string{"pool", "kind"}),
	}
}

// update points the adapter state at a pushed model, counting the
// placement moves since the last push.
func (s *adapterState) update(f fleet.Fleet, plan func(string) fleet.Plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pools := map[string]*adapterPool{}
	for i := range f.Pools {
		p := &f.Pools[i]
		if p.Balancer != fleet.ConsistentHash || p.LoRA == nil {
			continue
		}
		ap := &adapterPool{settings: *p.LoRA, header: p.LoRA.Header, keys: keyHeaders(p.Hash.Keys)}
		if old := s.pools[p.Name]; old != nil && old.settings.HalfLife == ap.settings.HalfLife {
			ap.sketch, ap.observed = old.sketch, old.observed
		} else {
			ap.sketch = hotkeys.NewSketch(ap.settings.HalfLife)
		}
		// Sized against the replicas that hold adapters: a saturated one
		// keeps its adapters, and saturation coming and going must not
		// resize them.
		for _, e := range p.Endpoints {
			if e.HoldsAdapters() {
				ap.healthy++
			}
		}
		pools[p.Name] = ap
		if s.seen[p.Name] == nil {
			s.seen[p.Name] = &adapterSeen{rejected: map[string]uint64{}, moves: map[string]uint64{}}
			for _, c := range moveCauses {
				s.moves.WithLabelValues(p.Name, c)
			}
			for _, r := range bodykey.AdapterRejections {
				s.rejected.WithLabelValues(p.Name, r)
			}
			s.requests.WithLabelValues(p.Name, "adapter")
			s.requests.WithLabelValues(p.Name, "base")
		}
		now := servedOf(p, plan(p.Name))
		if prev, ok := s.served[p.Name]; ok {
			for cause, n := range placementMoves(prev, now) {
				s.seen[p.Name].moves[cause] += n
				s.moves.WithLabelValues(p.Name, cause).Add(float64(n))
			}
		}
		s.served[p.Name] = now
	}
	for name := range s.seen {
		if pools[name] == nil {
			delete(s.seen, name)
			s.placed.forget(name)
			delete(s.below, name)
			delete(s.inFlight, name)
			delete(s.inFlightAt, name)
			delete(s.served, name)
			for _, c := range moveCauses {
				s.moves.DeleteLabelValues(name, c)
			}
			for _, r := range bodykey.AdapterRejections {
				s.rejected.DeleteLabelValues(name, r)
			}
			s.requests.DeleteLabelValues(name, "adapter")
			s.requests.DeleteLabelValues(name, "base")
		}
	}
	s.pools = pools
}

// servedOf is what a pushed pool serves of its adapters.
func servedOf(p *fleet.Pool, pl fleet.Plan) servedAdapters {
	sv := servedAdapters{members: map[string][]string{}, replicas: map[string]int{}, slots: map[string]int{}}
	for _, a := range p.Adapters {
		sv.replicas[a.Name] = a.Replicas
	}
	for _, a := range pl.Adapters {
		for _, e := range a.Members {
			sv.members[a.Name] = append(sv.members[a.Name], e.HashKey)
		}
	}
	for _, e := range p.Endpoints {
		sv.fleet = append(sv.fleet, e.HashKey+"\x00"+e.Health.String())
		sv.slots[e.HashKey] = e.MaxLoRA
	}
	return sv
}

// placementMoves counts the adapters whose members differ between two
// pushes, by cause: demand when the adapter's replicas differ (or it was
// placed or removed), else membership when the pool's replicas or their
// health differ, else capacity.
func placementMoves(a, b servedAdapters) map[string]uint64 {
	out := map[string]uint64{}
	names := map[string]bool{}
	for n := range a.members {
		names[n] = true
	}
	for n := range b.members {
		names[n] = true
	}
	for n := range names {
		if slices.Equal(a.members[n], b.members[n]) {
			continue
		}
		switch {
		case a.replicas[n] != b.replicas[n]:
			out[MoveDemand]++
		case !slices.Equal(a.fleet, b.fleet):
			out[MoveMembership]++
		default:
			out[MoveCapacity]++
		}
	}
	return out
}

// AdapterHeader is the adapter header of pool, "" when it places none.
func (s hotSink) AdapterHeader(pool string) string {
	a := s.r.lora
	a.mu.Lock()
	defer a.mu.Unlock()
	if ap := a.pools[pool]; ap != nil {
		return ap.header
	}
	return ""
}

// keyHeaders resolves a pool placing adapters (by its name, or an
// adapter cluster's) for the access log service, as hotSink.KeyHeaders
// does for pools with hot keys.
func (s *adapterState) keyHeaders(name string) (string, []string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pool, _, _ := strings.Cut(name, fleet.AdapterInfix)
	if ap := s.pools[pool]; ap != nil {
		return pool, ap.keys, true
	}
	return "", nil, false
}

// observe counts one logged request of a pool placing adapters, and
// returns the key and value its sketch counted it under (ok false: the
// pool places none).
func (s *adapterState) observe(req accesslog.Request, now time.Time) (key int, value string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ap := s.pools[req.Pool]
	if ap == nil {
		return 0, "", false
	}
	seen := s.seen[req.Pool]
	seen.requests++
	ap.observed++
	key, value = baseKey, baseValue
	switch {
	case req.Adapter != "" && !ap.settings.IsBase(req.Adapter):
		key, value = adapterKey, req.Adapter
		seen.adapters++
		s.requests.WithLabelValues(req.Pool, "adapter").Inc()
	default:
		s.requests.WithLabelValues(req.Pool, "base").Inc()
	}
	ap.sketch.Observe(key, value, now)
	if r := req.AdapterRejected; r != "" && slices.Contains(bodykey.AdapterRejections, r) {
		seen.rejected[r]++
		s.rejected.WithLabelValues(req.Pool, r).Inc()
	}
	return key, value, true
}

// absorb counts n requests another instance's Envoys logged, into the
// pool's sketch only (the counters are that instance's).
func (s *adapterState) absorb(pool string, key int, value string, n uint32, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ap := s.pools[pool]; ap != nil && ap.sketch.ObserveN(key, value, n, now) {
		ap.observed += uint64(n)
	}
}

// engineDemand is what a pool's engines report: by adapter, the replicas
// it is in flight on, and how many replicas report adapters at all; and
// each reporting replica's slots.
type engineDemand struct {
	inFlight  map[string]int
	reporting int
	slots     map[string]int
	overfull  []string
}

// enginesOf reads a pool's engine adapter state from the scrape view.
func enginesOf(v weights.PoolView) engineDemand {
	d := engineDemand{inFlight: map[string]int{}, slots: map[string]int{}}
	for id, r := range v.Replicas {
		a := r.Signals.Adapters
		if a == nil {
			continue
		}
		d.reporting++
		for _, n := range a.InFlight() {
			d.inFlight[n]++
		}
		if a.MaxLoRA > 0 {
			d.slots[id] = min(a.MaxLoRA, fleet.MaxAdapterSlots)
		}
		if a.Overfull {
			d.overfull = append(d.overfull, id)
		}
	}
	slices.Sort(d.overfull)
	return d
}

// decide decides the placement of each pool whose Interval has passed,
// while this instance leads, from its sketch and its engines (view: the
// scrape view by pool, nil when unknown). It reports whether a placement
// changed and when it next has to run (zero: no pool places adapters).
func (s *adapterState) decide(now time.Time, leading bool, view func() map[string]weights.PoolView) (changed bool, next time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var views map[string]weights.PoolView
	return s.placed.run(slices.Collect(maps.Keys(s.pools)), func(name string) time.Duration { return s.pools[name].settings.Interval },
		now, leading, func(name string) fleet.AdapterPlacement {
			if views == nil && view != nil {
				views = view()
			}
			return s.decidePool(name, s.pools[name], enginesOf(views[name]), now)
		})
}

// decidePool decides one pool's placement: shares from the logs when
// enough came since the last decision, else from the engines, else the
// previous placement's (fail static); then each adapter's replicas with
// hysteresis, at most settings.Max adapters, the always-placed first.
func (s *adapterState) decidePool(name string, ap *adapterPool, eng engineDemand, now time.Time) fleet.AdapterPlacement {
	prev := s.placed.own[name]
	// Leaving adapters are not placed any more: they only wait for their
	// cluster to go (stageAdapters).
	old := map[string]fleet.Adapter{}
	for _, a := range prev.Adapters {
		if a.Stage != fleet.StageLeaving {
			old[a.Name] = a
		}
	}
	healthy := max(ap.healthy, 1)
	headroom := placementHeadroom(ap.settings.MaxLoRA, eng.slots)
	need := map[string]int{}
	share := map[string]float64{}
	// shrinkTo is the size a placed adapter of need k on r replicas
	// shrinks to after a full interval below them: from the logs, its
	// need with shrinkSlack more headroom, so that a share that wavers
	// about a boundary does not move members back and forth; from the
	// engines, whose counts of replicas in flight waver more, k once it
	// is below half of r. A placement the engines sized before the logs
	// came (while the pool's own hash spread every adapter) thus comes
	// down to what the logs ask for.
	shrinkTo := func(_ string, k, r int) int {
		if 2*k < r {
			return k
		}
		return r
	}
	observed := ap.observed
	ap.observed = 0
	switch {
	case observed > 0 && ap.sketch.Total(now) >= hotkeys.MinRequests:
		est, _ := ap.sketch.Shares(now, keepAdapterShare)
		for _, e := range est {
			if e.ID.Key != adapterKey || ap.settings.IsBase(e.ID.Value) || fleet.CheckAdapterName(e.ID.Value) != "" {
				continue
			}
			if _, placed := old[e.ID.Value]; !placed && e.Share < minAdapterShare {
				continue
			}
			share[e.ID.Value] = e.Share
			need[e.ID.Value] = clampInt(int(math.Ceil(e.Share*float64(healthy)*headroom)), 1, healthy)
		}
		shrinkTo = func(n string, k, _ int) int {
			if sh, ok := share[n]; ok {
				return clampInt(int(math.Ceil(sh*float64(healthy)*headroom*shrinkSlack)), k, healthy)
			}
			return k
		}
	case eng.reporting > 0 && len(eng.inFlight) > 0:
		// In flight on r replicas, smoothed: keep it on as many (without
		// headroom, which would grow a placement that its own members
		// report).
		for n, r := range s.engineNeed(name, ap, eng, now) {
			share[n] = r / float64(eng.reporting)
			need[n] = clampInt(int(math.Round(r)), 1, healthy)
		}
	default:
		// No signal: the placement stays (its stages advance, and the
		// always-placed join), with the engines' slots.
		want := make([]fleet.Adapter, 0, len(old)+len(ap.settings.Always))
		for _, a := range old {
			want = append(want, a)
		}
		for _, n := range ap.settings.Always {
			if _, ok := old[n]; !ok {
				want = append(want, fleet.Adapter{Name: n, Replicas: 1})
			}
		}
		out := fleet.AdapterPlacement{Adapters: stageAdapters(want, prev.Adapters, ap.settings.Max), Slots: prev.Slots}
		if len(eng.slots) > 0 {
			out.Slots = eng.slots
		}
		return out
	}
	for _, n := range ap.settings.Always {
		if _, ok := need[n]; !ok {
			need[n] = 1
		}
	}
	// Adapters placed before and not seen now need none: they leave
	// after a full interval, like any shrink.
	for n := range old {
		if _, ok := need[n]; !ok {
			need[n] = 0
		}
	}
	below := s.below[name]
	if below == nil {
		below = map[string]time.Time{}
		s.below[name] = below
	}
	var out []fleet.Adapter
	for n, k := range need {
		r := k
		if o, ok := old[n]; ok && k < o.Replicas {
			r = o.Replicas
			if t := shrinkTo(n, k, o.Replicas); t < o.Replicas {
				since, ok := below[n]
				if !ok {
					below[n], since = now, now
				}
				if now.Sub(since) >= ap.settings.Interval {
					r = t
					delete(below, n)
				}
			} else {
				delete(below, n)
			}
		} else {
			delete(below, n)
		}
		if r <= 0 {
			continue
		}
		sh := round6(share[n])
		if o, ok := old[n]; ok && sh >= o.Share/shareBand && sh <= o.Share*shareBand {
			// Shares order the placement: noise must not reorder it.
			sh = o.Share
		}
		out = append(out, fleet.Adapter{Name: n, Replicas: min(r, healthy), Share: sh})
	}
	for n := range below {
		if _, ok := need[n]; !ok {
			delete(below, n)
		}
	}
	// The always-placed first, then by share; at most Max.
	slices.SortFunc(out, func(a, b fleet.Adapter) int {
		aa, ba := slices.Contains(ap.settings.Always, a.Name), slices.Contains(ap.settings.Always, b.Name)
		if aa != ba {
			if aa {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(b.Share, a.Share), cmp.Compare(a.Name, b.Name))
	})
	if len(out) > ap.settings.Max {
		out = out[:ap.settings.Max]
	}
	out = stageAdapters(out, prev.Adapters, ap.settings.Max)
	// Shares move every decision; a placement changes only when an
	// adapter's replicas do, so keep the shares it was decided with
	// unless the order of placement (by share) changes.
	if sameReplicas(out, prev.Adapters) && sameOrder(out, prev.Adapters) {
		out = slices.Clone(prev.Adapters)
	}
	slots := prev.Slots
	if len(eng.slots) > 0 {
		slots = eng.slots
	}
	return fleet.AdapterPlacement{Adapters: out, Slots: slots}
}

// placementHeadroom is the headroom adapters are sized with
// (adapterHeadroom): for the fewest slots for placed adapters of any
// replica whose engine reports its max_lora (slots), else of the
// policy's maxLoRA.
func placementHeadroom(maxLoRA int, slots map[string]int) float64 {
	n := maxLoRA
	if len(slots) > 0 {
		n = math.MaxInt
		for _, v := range slots {
			n = min(n, v)
		}
	}
	n = max(n, 1)
	placed := n - fleet.TailSlots(n)
	return min(1, adapterHeadroom*float64(placed))
}

// engineNeed smooths the replicas each adapter is in flight on over the
// pool's half-life, as logged requests are: an engine reports only the
// adapters with a request in flight at the scrape, so a rare adapter
// comes and goes from one decision to the next, and a placement that
// followed it would move it out and back in each time (a cold cache and a
// swap-in). A new adapter starts at what it is in flight on now; one no
// longer reported decays, and is not placed once below minInFlight.
func (s *adapterState) engineNeed(pool string, ap *adapterPool, eng engineDemand, now time.Time) map[string]float64 {
	avg := s.inFlight[pool]
	if avg == nil {
		avg = map[string]float64{}
		s.inFlight[pool] = avg
	}
	keep := 1.0
	if at, ok := s.inFlightAt[pool]; ok && now.After(at) {
		keep = math.Exp2(-float64(now.Sub(at)) / float64(ap.settings.HalfLife))
	}
	s.inFlightAt[pool] = now
	for n, r := range eng.inFlight {
		if ap.settings.IsBase(n) || fleet.CheckAdapterName(n) != "" {
			continue
		}
		if _, ok := avg[n]; !ok {
			avg[n] = float64(r)
			continue
		}
		avg[n] = keep*avg[n] + (1-keep)*float64(r)
	}
	out := map[string]float64{}
	for n, a := range avg {
		if _, ok := eng.inFlight[n]; !ok {
			a *= keep
			avg[n] = a
		}
		if a < minInFlight {
			delete(avg, n)
			continue
		}
		out[n] = a
	}
	return out
}

// stageAdapters returns the adapters of a decision that wants the
// adapters want placed, one stage on from the previous decision prev
// (make before break, see fleet.StageAdding): an adapter prev served
// (in any stage) is routed, one it did not serve is adding; one prev
// routed and want drops is leaving, with its previous replicas, so that
// its cluster outlives its route by one decision; one prev had adding or
// leaving and want drops is gone (no route of it was served). Leaving
// adapters count toward max: adding ones, of lowest share first, wait
// for a later decision when they would exceed it. The result is sorted
// by name.
func stageAdapters(want, prev []fleet.Adapter, max int) []fleet.Adapter {
	before := make(map[string]fleet.Adapter, len(prev))
	for _, a := range prev {
		before[a.Name] = a
	}
	out := make([]fleet.Adapter, 0, len(want)+len(prev))
	kept := map[string]bool{}
	for _, a := range want {
		a.Stage = fleet.StageAdding
		if _, ok := before[a.Name]; ok {
			a.Stage = ""
		}
		kept[a.Name] = true
		out = append(out, a)
	}
	for _, a := range prev {
		if a.Stage == "" && !kept[a.Name] {
			a.Stage = fleet.StageLeaving
			out = append(out, a)
		}
	}
	if len(out) > max {
		// Only adding adapters go: the others were all in prev, which
		// held at most max.
		slices.SortStableFunc(out, func(a, b fleet.Adapter) int {
			return cmp.Or(cmp.Compare(stageRank(a), stageRank(b)), byShareThenName(a, b))
		})
		out = out[:max]
	}
	slices.SortFunc(out, func(a, b fleet.Adapter) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// stageRank orders adding adapters last.
func stageRank(a fleet.Adapter) int {
	if a.Stage == fleet.StageAdding {
		return 1
	}
	return 0
}

func byShareThenName(a, b fleet.Adapter) int {
	return cmp.Or(cmp.Compare(b.Share, a.Share), cmp.Compare(a.Name, b.Name))
}

func clampInt(v, lo, hi int) int { return max(lo, min(v, hi)) }

// round6 keeps a share to six decimals, so placements compare and
// publish stably.
func round6(f float64) float64 { return math.Round(f*1e6) / 1e6 }

func sameReplicas(a, b []fleet.Adapter) bool {
	return slices.EqualFunc(a, b, func(x, y fleet.Adapter) bool {
		return x.Name == y.Name && x.Replicas == y.Replicas && x.Stage == y.Stage
	})
}

// sameOrder reports whether a and b (same names) order alike by share.
func sameOrder(a, b []fleet.Adapter) bool {
	order := func(as []fleet.Adapter) []string {
		c := slices.Clone(as)
		slices.SortStableFunc(c, func(x, y fleet.Adapter) int {
			return cmp.Or(cmp.Compare(y.Share, x.Share), cmp.Compare(x.Name, y.Name))
		})
		out := make([]string, len(c))
		for i, x := range c {
			out[i] = x.Name
		}
		return out
	}
	return slices.Equal(order(a), order(b))
}

// placementKind compares and copies placements; one without adapters or
// slots is empty.
var placementKind = decisionKind[fleet.AdapterPlacement]{
	equal: func(a, b fleet.AdapterPlacement) bool {
		return slices.Equal(a.Adapters, b.Adapters) && maps.Equal(a.Slots, b.Slots)
	},
	clone: func(pl fleet.AdapterPlacement) (fleet.AdapterPlacement, bool) {
		return fleet.AdapterPlacement{Adapters: slices.Clone(pl.Adapters), Slots: maps.Clone(pl.Slots)},
			len(pl.Adapters) > 0 || len(pl.Slots) > 0
	},
}

// ownPlacements returns a copy of the placements this instance decided.
func (s *adapterState) ownPlacements() Placements {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.placed.copy()
}

// seed makes a new leader start from its predecessor's placements, and
// decide one Interval after now.
func (s *adapterState) seed(p Placements, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.placed.seed(p, slices.Collect(maps.Keys(s.pools)), now)
}

func clonePlacements(p Placements) Placements { return cloneDecided(p, placementKind) }

// WithAdapters puts each pool's placement into f: pools placing adapters
// take their placement's adapters (and their always-placed adapters at one
// replica until decided) and their replicas' engine-reported slots; other
// pools none. Bad entries are left to fleet.Prepare, which drops them
// with a reason.
func WithAdapters(f fleet.Fleet, placements Placements) fleet.Fleet {
	for i := range f.Pools {
		p := &f.Pools[i]
		p.Adapters = nil
		if p.Balancer != fleet.ConsistentHash || p.LoRA == nil {
			continue
		}
		pl := placements[p.Name]
		as := slices.Clone(pl.Adapters)
		for _, n := range p.LoRA.Always {
			if !slices.ContainsFunc(as, func(a fleet.Adapter) bool { return a.Name == n }) {
				// Not decided yet: its cluster first, its route with the
				// decision that places it.
				as = append(as, fleet.Adapter{Name: n, Replicas: 1, Stage: fleet.StageAdding})
			}
		}
		slices.SortStableFunc(as, func(a, b fleet.Adapter) int { return cmp.Compare(a.Name, b.Name) })
		p.Adapters = slices.CompactFunc(as, func(a, b fleet.Adapter) bool { return a.Name == b.Name })
		if len(pl.Slots) > 0 {
			// Copied: the endpoints are the caller's.
			p.Endpoints = slices.Clone(p.Endpoints)
			for j := range p.Endpoints {
				if n, ok := pl.Slots[p.Endpoints[j].Identity()]; ok && n > 0 && n <= fleet.MaxAdapterSlots {
					p.Endpoints[j].MaxLoRA = n
				}
			}
		}
	}
	return f
}

// status is the adapter part of each pool's status.
func (s *adapterState) status(f fleet.Fleet, plan func(string) fleet.Plan, view map[string]weights.PoolView) map[string]*status.Adapters {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]*status.Adapters{}
	for i := range f.Pools {
		p := &f.Pools[i]
		if p.LoRA == nil {
			continue
		}
		eng := enginesOf(view[p.Name])
		st := &status.Adapters{Header: p.LoRA.Header, Adapters: []status.Adapter{}, Rejected: map[string]uint64{}, Moves: map[string]uint64{},
			Overfull: eng.overfull, EnginesReporting: eng.reporting, GRPCJS: status.AdaptersGRPCJS}
		if ap := s.pools[p.Name]; ap != nil {
			st.Tracked = ap.sketch.Len()
		}
		if seen := s.seen[p.Name]; seen != nil {
			st.Requests, st.AdapterRequests = seen.requests, seen.adapters
			for _, r := range bodykey.AdapterRejections {
				st.Rejected[r] = seen.rejected[r]
			}
			for _, c := range moveCauses {
				st.Moves[c] = seen.moves[c]
			}
		}
		if !p.LoadAt.IsZero() {
			for _, e := range p.Endpoints {
				if n := strings.Count(e.InFlightAdapters, " ") + 1; e.InFlightAdapters != "" && n >= p.LoRA.Slots(&e) {
					st.SlotsFull = append(st.SlotsFull, e.Identity())
				}
			}
			slices.Sort(st.SlotsFull)
		}
		pl := plan(p.Name)
		for j, a := range p.Adapters {
			sa := status.Adapter{Name: a.Name, Replicas: a.Replicas, Share: a.Share, InFlight: eng.inFlight[a.Name], Stage: a.Stage}
			if j < len(pl.Adapters) {
				sa.OverCapacity = pl.Adapters[j].OverCapacity
				for _, e := range pl.Adapters[j].Members {
					sa.Members = append(sa.Members, status.AdapterMember{Identity: e.HashKey, Health: e.Health.String()})
				}
			}
			st.Adapters = append(st.Adapters, sa)
		}
		slices.SortStableFunc(st.Adapters, func(a, b status.Adapter) int { return cmp.Compare(b.Share, a.Share) })
		out[p.Name] = st
	}
	return out
}
