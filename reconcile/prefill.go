package reconcile

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/xds/accesslog"
	"github.com/kvxds/kvxds/xds/translate"
)

// prefillState counts, per decode pool of prefill/decode disaggregation,
// the logged requests by decode replica and the prefill replica Envoy's
// Lua filter named for them. Only pairs of replicas the pushed model has
// are kept, so memory is bounded by the pools' sizes whatever the logs
// say.
type prefillState struct {
	mu    sync.Mutex
	pools map[string]*prefillPool
	// own are the moves this instance decided (or, after gaining the
	// lead, its predecessor's), by decode pool; decided when.
	own     PrefillMoves
	decided map[string]time.Time

	requests *prometheus.CounterVec
}

// Results of a decode pool's logged request, as
// kvxds_prefill_requests_logged_total labels them.
const (
	prefillRemote  = "remote"  // named a prefill replica of the table
	prefillLocal   = "local"   // named none: the decode replica prefilled
	prefillUnknown = "unknown" // named a replica, or went to one, the model lacks
)

type prefillPool struct {
	settings fleet.Prefill
	// keys are the prefill pool's key headers as the decode listener
	// logs them (translate.PrefillLogHeaders).
	keys                      []string
	decode                    map[string]bool // the decode replicas' addresses
	prefill                   map[string]bool // the table's hosts
	requests, remote, unknown uint64
	pairs                     map[[2]string]uint64
	// table is the pushed model's prefill table; slots what the logs
	// said of its slots (nil unless the pool places idle slots).
	table *fleet.PrefillTable
	slots *slotLog
}

// PrefillMoves are the decode pools' prefill moves, by pool.
type PrefillMoves = map[string][]fleet.PrefillMove

// slotLog is what the logs said of a prefill table's slots: when each was
// last used, and its requests as a count decaying with halfLife (as of
// at).
type slotLog struct {
	last     []time.Time
	rate     []float64
	at       []time.Time
	halfLife time.Duration
}

func newSlotLog(halfLife time.Duration) *slotLog {
	return &slotLog{last: make([]time.Time, fleet.PrefillSlots), rate: make([]float64, fleet.PrefillSlots),
		at: make([]time.Time, fleet.PrefillSlots), halfLife: halfLife}
}

func (l *slotLog) decayed(s int, now time.Time) float64 {
	if l.at[s].IsZero() || l.rate[s] == 0 {
		return 0
	}
	return l.rate[s] * math.Exp2(-now.Sub(l.at[s]).Seconds()/l.halfLife.Seconds())
}

func (l *slotLog) observe(s int, now time.Time) {
	l.rate[s] = l.decayed(s, now) + 1
	l.at[s], l.last[s] = now, now
}

// load is the slots' load as of now: idle when unused for idleAfter.
func (l *slotLog) load(now time.Time, idleAfter time.Duration) fleet.SlotLoad {
	out := fleet.SlotLoad{Idle: make([]bool, len(l.last)), Rate: make([]float64, len(l.last))}
	for s := range l.last {
		out.Idle[s] = l.last[s].IsZero() || now.Sub(l.last[s]) >= idleAfter
		out.Rate[s] = l.decayed(s, now)
	}
	return out
}

func newPrefillState(reg prometheus.Registerer) *prefillState {
	return &prefillState{pools: map[string]*prefillPool{}, own: PrefillMoves{}, decided: map[string]time.Time{},
		requests: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_prefill_requests_logged_total",
			Help: "Logged requests of decode pools (prefill/decode disaggregation), by pool and result: remote (the Lua filter named a prefill replica of the table), local (it named none: the decode replica prefills), unknown (a replica the pushed model does not have).",
		}, []string{"pool", "result"}),
	}
}

// update points the state at a pushed model. A pool keeps its counts;
// pairs of replicas that left are dropped.
func (s *prefillState) update(f fleet.Fleet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pools := map[string]*prefillPool{}
	for i := range f.Pools {
		p := &f.Pools[i]
		if p.Prefill == nil || p.PrefillTable == nil {
			continue
		}
		pp := &prefillPool{settings: *p.Prefill, keys: translate.PrefillLogHeaders(p.PrefillTable),
			decode: map[string]bool{}, prefill: map[string]bool{}, pairs: map[[2]string]uint64{}, table: p.PrefillTable}
		for _, e := range p.Endpoints {
			pp.decode[e.Address()] = true
		}
		for _, h := range p.PrefillTable.Hosts {
			pp.prefill[h] = true
		}
		old := s.pools[p.Name]
		if p.Prefill.PlacesIdle() {
			// The slots' load is kept while how it decays is.
			if old != nil && old.slots != nil && old.slots.halfLife == slotHalfLife(p.Prefill) {
				pp.slots = old.slots
			} else {
				pp.slots = newSlotLog(slotHalfLife(p.Prefill))
			}
		}
		if old != nil {
			pp.requests, pp.remote, pp.unknown = old.requests, old.remote, old.unknown
			for k, n := range old.pairs {
				if pp.decode[k[0]] && pp.prefill[k[1]] {
					pp.pairs[k] = n
				}
			}
		} else {
			for _, r := range []string{prefillRemote, prefillLocal, prefillUnknown} {
				s.requests.WithLabelValues(p.Name, r)
			}
		}
		pools[p.Name] = pp
	}
	for name := range s.pools {
		if pools[name] == nil {
			for _, r := range []string{prefillRemote, prefillLocal, prefillUnknown} {
				s.requests.DeleteLabelValues(name, r)
			}
		}
	}
	for name := range s.own {
		if pp := pools[name]; pp == nil || pp.slots == nil {
			delete(s.own, name)
			delete(s.decided, name)
		}
	}
	s.pools = pools
}

// slotHalfLife is how fast a slot's logged requests are forgotten: over
// half the time after which it is idle.
func slotHalfLife(p *fleet.Prefill) time.Duration { return max(p.IdleAfter/2, time.Second) }

// header is the prefill header of a decode pool, "" for other pools.
func (s *prefillState) header(pool string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pp := s.pools[pool]; pp != nil {
		return pp.settings.Header
	}
	return ""
}

// keys is a decode pool's prefill pool and its key headers as logged.
func (s *prefillState) keys(pool string) (string, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pp := s.pools[pool]; pp != nil {
		return pp.settings.Pool, pp.keys
	}
	return "", nil
}

// keyHeaders resolves a decode pool for the access log service; it has no
// key chain of its own unless it also hashes, which hotSink resolves first.
func (s *prefillState) keyHeaders(name string) (string, []string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pools[name] != nil {
		return name, nil, true
	}
	return "", nil, false
}

// observe counts one logged request of a decode pool, observed at now.
func (s *prefillState) observe(req accesslog.Request, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pp := s.pools[req.Pool]
	if pp == nil {
		return
	}
	pp.requests++
	result := prefillLocal
	switch {
	case req.Prefill == "":
	case !pp.prefill[req.Prefill] || !pp.decode[req.Upstream]:
		result = prefillUnknown
		pp.unknown++
	default:
		result = prefillRemote
		pp.remote++
		pp.pairs[[2]string{req.Upstream, req.Prefill}]++
		// Observed at arrival, as hot keys are.
		if pp.slots != nil && req.PrefillSlot >= 0 && req.PrefillSlot < fleet.PrefillSlots {
			pp.slots.observe(req.PrefillSlot, now)
		}
	}
	s.requests.WithLabelValues(req.Pool, result).Inc()
}

// maxPrefillMoves bounds the idle slots one placement moves, an eighth of
// the table: a route update moves at most that many of the slots that
// new conversations may land on.
const maxPrefillMoves = fleet.PrefillSlots / 8

// decide places each decode pool's idle slots whose PlaceEvery has
// passed, while this instance leads. It reports whether moves changed,
// and when it next has to run (zero: no pool places idle slots).
func (s *prefillState) decide(now time.Time, leading bool) (changed bool, next time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(s.pools)) {
		pp := s.pools[name]
		if pp.slots == nil {
			continue
		}
		every := pp.settings.PlaceEvery
		due := s.decided[name].Add(every)
		if !leading {
			due = now.Add(every)
		} else if !now.Before(due) {
			m := fleet.PlaceIdleSlots(pp.table, pp.slots.load(now, pp.settings.IdleAfter), maxPrefillMoves)
			if !slices.Equal(m, s.own[name]) {
				if len(m) > 0 {
					s.own[name] = m
				} else {
					delete(s.own, name)
				}
				changed = true
			}
			s.decided[name] = now
			due = now.Add(every)
		}
		if d := due.Sub(now); next == 0 || d < next {
			next = d
		}
	}
	return changed, next
}

// ownMoves returns a copy of the moves this instance decided.
func (s *prefillState) ownMoves() PrefillMoves {
	s.mu.Lock()
	defer s.mu.Unlock()
	return clonePrefillMoves(s.own)
}

// seed makes a new leader start from its predecessor's moves, and decide
// one PlaceEvery after now.
func (s *prefillState) seed(m PrefillMoves, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.own = clonePrefillMoves(m)
	s.decided = map[string]time.Time{}
	for name := range s.pools {
		s.decided[name] = now
	}
}

func clonePrefillMoves(m PrefillMoves) PrefillMoves {
	out := make(PrefillMoves, len(m))
	for pool, ms := range m {
		if len(ms) > 0 {
			out[pool] = slices.Clone(ms)
		}
	}
	return out
}

// WithPrefillMoves puts each decode pool's prefill moves into f: pools
// that place idle slots take theirs, sorted by slot, one per slot; other
// pools none. fleet.Prepare leaves out moves to replicas its table does
// not serve.
func WithPrefillMoves(f fleet.Fleet, moves PrefillMoves) fleet.Fleet {
	for i := range f.Pools {
		p := &f.Pools[i]
		p.PrefillMoves = nil
		if !p.Prefill.PlacesIdle() || len(moves[p.Name]) == 0 {
			continue
		}
		ms := slices.Clone(moves[p.Name])
		slices.SortStableFunc(ms, func(a, b fleet.PrefillMove) int { return cmp.Compare(a.Slot, b.Slot) })
		p.PrefillMoves = slices.CompactFunc(ms, func(a, b fleet.PrefillMove) bool { return a.Slot == b.Slot })
	}
	return f
}

// status is each decode pool's prefill side, by pool.
func (s *prefillState) status(f fleet.Fleet) map[string]*status.Prefill {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]*status.Prefill{}
	for i := range f.Pools {
		p := &f.Pools[i]
		if p.Prefill == nil {
			continue
		}
		st := &status.Prefill{Pool: p.Prefill.Pool, Header: p.Prefill.Header, MinBodyBytes: p.Prefill.MinBodyBytes,
			Hosts: []status.PrefillHost{}, Pairs: []status.PrefillPair{}}
		if t := p.PrefillTable; t != nil {
			st.Slots = len(t.Slots)
			for j, n := range t.Shares() {
				st.Hosts = append(st.Hosts, status.PrefillHost{Address: t.Hosts[j], Slots: n})
			}
			slices.SortStableFunc(st.Hosts, func(a, b status.PrefillHost) int { return cmp.Compare(b.Slots, a.Slots) })
		}
		if pp := s.pools[p.Name]; pp != nil {
			st.Requests, st.Remote, st.Unknown = pp.requests, pp.remote, pp.unknown
			for k, n := range pp.pairs {
				st.Pairs = append(st.Pairs, status.PrefillPair{Decode: k[0], Prefill: k[1], Requests: n})
			}
			slices.SortFunc(st.Pairs, func(a, b status.PrefillPair) int {
				return cmp.Or(cmp.Compare(a.Decode, b.Decode), cmp.Compare(a.Prefill, b.Prefill))
			})
		}
		out[p.Name] = st
	}
	return out
}
