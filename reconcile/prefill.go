package reconcile

import (
	"cmp"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/xds/accesslog"
	"github.com/kvxds/kvxds/xds/translate"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// prefillState counts, per decode pool of prefill/decode disaggregation,
// the logged requests by decode replica and the prefill replica Envoy's
// Lua filter named for them. Only pairs of replicas the pushed model has
// are kept, so memory is bounded by the pools' sizes whatever the logs
// say.
type prefillState struct {
	mu    sync.Mutex
	pools map[string]*prefillPool

	requests *prometheus.CounterVec
	away     *prometheus.CounterVec
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
	// table is the pushed prefill table, hot its hot keys by "index:value";
	// keyed counts the remote requests that carried a prefill key, away
	// those named another replica than their key's slot's, by reason.
	table *fleet.SlotTable
	hot   map[string]bool
	keyed uint64
	away  map[string]uint64
}

func newPrefillState(reg prometheus.Registerer) *prefillState {
	return &prefillState{pools: map[string]*prefillPool{},
		requests: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_prefill_requests_logged_total",
			Help: "Logged requests of decode pools (prefill/decode disaggregation), by pool and result: remote (the Lua filter named a prefill replica of the table), local (it named none: the decode replica prefills), unknown (a replica the pushed model does not have).",
		}, []string{"pool", "result"}),
		away: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_prefill_requests_away_total",
			Help: "Logged requests of decode pools whose prefill replica was not their prefill key's slot's in the pushed table, by pool and reason: spread (a hot key's conversation), followed (the prefill filter sent it where its key's last request went), bound (the Envoy's bound on its requests in flight, or a table not yet applied).",
		}, []string{"pool", "reason"}),
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
			decode: map[string]bool{}, prefill: map[string]bool{}, pairs: map[[2]string]uint64{},
			table: p.PrefillTable, hot: map[string]bool{}, away: map[string]uint64{}}
		for _, k := range p.PrefillTable.Hot {
			pp.hot[strconv.Itoa(k.Key)+":"+k.Value] = true
		}
		for _, e := range p.Endpoints {
			pp.decode[e.Address()] = true
		}
		for _, h := range p.PrefillTable.Hosts {
			pp.prefill[h] = true
		}
		if old := s.pools[p.Name]; old != nil {
			pp.requests, pp.remote, pp.unknown, pp.keyed = old.requests, old.remote, old.unknown, old.keyed
			pp.away = old.away
			for k, n := range old.pairs {
				if pp.decode[k[0]] && pp.prefill[k[1]] {
					pp.pairs[k] = n
				}
			}
		} else {
			for _, r := range []string{prefillRemote, prefillLocal, prefillUnknown} {
				s.requests.WithLabelValues(p.Name, r)
			}
			for _, r := range prefillAwayReasons {
				s.away.WithLabelValues(p.Name, r)
			}
		}
		pools[p.Name] = pp
	}
	for name := range s.pools {
		if pools[name] == nil {
			for _, r := range []string{prefillRemote, prefillLocal, prefillUnknown} {
				s.requests.DeleteLabelValues(name, r)
			}
			for _, r := range prefillAwayReasons {
				s.away.DeleteLabelValues(name, r)
			}
		}
	}
	s.pools = pools
}

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

// observe counts one logged request of a decode pool.
func (s *prefillState) observe(req accesslog.Request) {
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
		if req.PrefillValue != "" {
			pp.keyed++
			if reason := pp.awayReason(req.PrefillKey, req.PrefillValue, req.Prefill, req.Followed); reason != "" {
				pp.away[reason]++
				s.away.WithLabelValues(req.Pool, reason).Inc()
			}
		}
	}
	s.requests.WithLabelValues(req.Pool, result).Inc()
}

// Reasons a keyed request prefilled away from its key's slot's replica.
var prefillAwayReasons = []string{status.AwaySpread, status.AwayFollow, status.AwayBound}

// awayReason says why the prefill replica named for a request of key
// index key and value was not its slot's in the table, "" if it was: a
// hot key spreads its conversations; the filter followed the key where
// its last request went (followed); otherwise the Envoy's bound passed
// it on (or it routed with a table not yet applied).
func (pp *prefillPool) awayReason(key int, value, named string, followed bool) string {
	if pp.table.Host(bodykey.PrefillSlot(value, fleet.PrefillSlots)) == named {
		return ""
	}
	if pp.hot[strconv.Itoa(key)+":"+value] {
		return status.AwaySpread
	}
	if followed {
		return status.AwayFollow
	}
	return status.AwayBound
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
			st.Requests, st.Remote, st.Unknown, st.Keyed = pp.requests, pp.remote, pp.unknown, pp.keyed
			st.Away = map[string]uint64{}
			for _, r := range prefillAwayReasons {
				st.Away[r] = pp.away[r]
			}
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
