package reconcile

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/inflight"
	"github.com/kvxds/kvxds/xds/accesslog"
	"github.com/kvxds/kvxds/xds/translate"
)

// Loads are the pools' observed bytes in flight, as the last push served
// them; a pool is present when its Envoys log their load to this
// instance.
type Loads map[string]PoolLoad

// PoolLoad is a pool's bytes in flight by replica address, and in a pool
// placing LoRA adapters the adapters in flight there, counted at At.
type PoolLoad struct {
	At       time.Time
	Bytes    map[string]uint64
	Adapters map[string][]string
	// Went are the keys last sent away from their slot's replica.
	Went map[string]inflight.Went
	// Seen are the keys placed, home or away (inflight.Load.Seen).
	Seen string
}

// same reports whether l and o carry the same figures.
func (l PoolLoad) same(o inflight.Load) bool {
	return maps.Equal(l.Bytes, o.Bytes) && maps.EqualFunc(l.Adapters, o.Adapters, slices.Equal) && maps.Equal(l.Went, o.Went) && l.Seen == o.Seen
}

// loadState counts the requests in flight that Envoys' load logs report
// (inflight.Tracker) and decides, every pool's load interval, whether the
// pick tables must carry new figures. Unlike hot keys and weights, the
// figures are this instance's own and are not published: they move no
// key, only where a bound overflows, and each instance knows the
// requests of the Envoys attached to it.
type loadState struct {
	tracker *inflight.Tracker
	// exchange holds the figures of the other kvxds instances' Envoys,
	// which the served figures add to this instance's own.
	exchange *ha.LoadExchange
	reports  *prometheus.CounterVec

	mu sync.Mutex
	// intervals are the pools whose load is observed, by name; logs
	// how each load log's entries count, by the name of the pool whose
	// listener writes it (a decode pool's count against its prefill
	// pool's replicas).
	intervals map[string]time.Duration
	logs      map[string]accesslog.LoadLog
	due       map[string]time.Time
	served    Loads
	pushes    *prometheus.CounterVec
	placed    *prometheus.GaugeVec
}

func newLoadState(reg prometheus.Registerer, x *ha.LoadExchange) *loadState {
	f := promauto.With(reg)
	entries := f.NewCounterVec(prometheus.CounterOpts{
		Name: "kvxds_load_log_requests_total",
		Help: "Requests' upstream attempts in Envoys' load logs, by result: started, computed (a later request of the same Envoy worker named its first token: its bytes stop counting), ended, or dropped (unmatched: an end without its start; duplicate; pool_full: past the bound of open requests per pool) or forgotten (expired: open past 10 minutes; stream_end: open when its Envoy's log stream ended).",
	}, []string{"result"})
	for _, r := range inflight.Results {
		entries.WithLabelValues(r)
	}
	if x == nil {
		x = ha.NewLoadExchange("", nil)
	}
	reports := f.NewCounterVec(prometheus.CounterOpts{
		Name: "kvxds_load_reports_total",
		Help: "Reports to the kvxds instance this one follows of its Envoys' requests in flight and logged requests, by result: sent (answered with the other instances' figures) or failed (its own figures alone are served once the last answer expires; the logged requests are lost).",
	}, []string{"result"})
	reports.WithLabelValues("sent")
	reports.WithLabelValues("failed")
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "kvxds_ha_observations_dropped_total",
		Help: "Logged requests this instance did not forward to the instance it follows: their key values were beyond the 8,192 of one report.",
	}, func() float64 { return float64(x.DroppedObservations()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kvxds_load_reporting_instances",
		Help: "Other kvxds instances whose reports of their Envoys' requests in flight this instance adds to its own (it is the one they follow).",
	}, func() float64 { return float64(x.Reporters()) })
	return &loadState{
		exchange:  x,
		reports:   reports,
		tracker:   inflight.New(func(r string, n int) { entries.WithLabelValues(r).Add(float64(n)) }),
		intervals: map[string]time.Duration{}, logs: map[string]accesslog.LoadLog{}, due: map[string]time.Time{}, served: Loads{},
		pushes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_load_tables_total",
			Help: "Pick tables served with new figures of the replicas' bytes in flight (changed, refreshed after five intervals, or dropped without log streams), by pool: each is one route update of the pool, at most one per load interval.",
		}, []string{"pool"}),
		placed: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_load_keys_placed",
			Help: "Keys the pick filters placed in the last ten minutes, home or away, in the served table's set of 65,536 bits, by pool (a key whose bit another key set counts once): the filters bound a key outside it at the mean. Past about 10,000, one new key in seven passes for one with a cache.",
		}, []string{"pool"}),
	}
}

// update learns the pools that observe load from the pushed fleet.
func (l *loadState) update(f fleet.Fleet) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := map[string]time.Duration{}
	clear(l.logs)
	for i := range f.Pools {
		p := &f.Pools[i]
		switch {
		case translate.PrefillLoad(p, translate.Envoy):
			next[p.Prefill.Pool] = p.PrefillTable.LoadInterval
			l.logs[p.Name] = accesslog.LoadLog{Pool: p.Prefill.Pool, HostHeader: p.Prefill.Header}
		case translate.ObservesLoad(p, translate.Envoy):
			next[p.Name] = p.Hash.LoadInterval
			ll := accesslog.LoadLog{Pool: p.Name}
			if p.LoRA != nil {
				ll.AdapterHeader = p.LoRA.Header
			}
			l.logs[p.Name] = ll
		}
	}
	for name := range l.intervals {
		if _, ok := next[name]; !ok {
			delete(l.due, name)
			delete(l.served, name)
			l.placed.DeleteLabelValues(name)
			l.tracker.Forget(name)
		}
	}
	l.intervals = next
	l.exchange.SetPools(next)
}

// observing reports whether a pool observes load.
func (l *loadState) observing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.intervals) > 0
}

// decide takes each due pool's snapshot; changed is true when one
// differs from what was served (then current has it), or when figures
// not all zero (bytes, or adapters in flight) were served half their TTL
// ago (so that filters keep
// believing them), next is the wait until the next pool is due (zero for
// none).
func (l *loadState) decide(now time.Time) (changed bool, next time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, iv := range l.intervals {
		if d, ok := l.due[name]; ok && now.Before(d) {
			if w := d.Sub(now); next == 0 || w < next {
				next = w
			}
			continue
		}
		l.due[name] = now.Add(iv)
		if next == 0 || iv < next {
			next = iv
		}
		snap, ok := l.tracker.Snapshot(name, now)
		l.exchange.SetOwn(name, snap, ok)
		// The other instances' Envoys' figures, where they report them.
		if others, has := l.exchange.Peers(name); has {
			snap, ok = snap.Add(others), true
		}
		// A key the sum names as sent away leaves a tombstone when this
		// instance's Envoys send it home; tombstones are not served.
		// (snap's maps are also the report to the other instances: not
		// changed in place.)
		l.tracker.SetServed(name, snap.Went)
		snap.Went = awayOnly(snap.Went)
		old, had := l.served[name]
		refresh := had && (len(old.Bytes) > 0 || len(old.Adapters) > 0 || len(old.Went) > 0 || old.Seen != "") && now.Sub(old.At) >= 5*iv
		switch {
		case !ok && had:
			delete(l.served, name)
			l.placed.DeleteLabelValues(name)
		case ok && (!had || refresh || !old.same(snap)):
			if snap.Bytes == nil {
				snap.Bytes = map[string]uint64{}
			}
			l.served[name] = PoolLoad{At: now, Bytes: snap.Bytes, Adapters: snap.Adapters, Went: snap.Went, Seen: snap.Seen}
			l.placed.WithLabelValues(name).Set(float64(inflight.SeenCount(snap.Seen)))
		default:
			continue
		}
		l.pushes.WithLabelValues(name).Inc()
		changed = true
	}
	return changed, next
}

// current is the figures to serve.
func (l *loadState) current() Loads {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.served)
}

// LoadSink is where the access log service hands this instance's load
// logs.
func (r *Reconciler) LoadSink() accesslog.LoadSink { return loadSink{r.load} }

type loadSink struct{ l *loadState }

func (s loadSink) LoadPool(name string) (accesslog.LoadLog, bool) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	ll, ok := s.l.logs[name]
	return ll, ok
}

func (s loadSink) Start(stream uint64, pool, key string, a inflight.Attempt) {
	s.l.tracker.Start(stream, pool, key, a)
}

func (s loadSink) End(stream uint64, pool, key string) { s.l.tracker.End(stream, pool, key) }

func (s loadSink) Computed(stream uint64, pool string, ids []string) {
	s.l.tracker.Computed(stream, pool, ids)
}

func (s loadSink) CloseStream(stream uint64) { s.l.tracker.CloseStream(stream) }

// WithLoad puts the observed requests in flight into f's pools that
// observe load, and into prefill pools whose decode pools observe it:
// each endpoint's InFlightBytes (zero when none is open) and
// InFlightAdapters, and LoadAt. Other pools' are cleared.
func WithLoad(f fleet.Fleet, loads Loads) fleet.Fleet {
	// Prefill pools, whose decode pools' logs may load them (f is not
	// prepared: it has no prefill tables yet).
	prefills := prefillPools(f)
	for i := range f.Pools {
		p := &f.Pools[i]
		load, ok := loads[p.Name]
		p.LoadAt, p.Went, p.Seen = time.Time{}, nil, ""
		if ok && (translate.ObservesLoad(p, translate.Envoy) || prefills[p.Name] && p.Hash.LoadInterval > 0) {
			p.LoadAt, p.Seen = load.At, load.Seen
			for k, w := range load.Went {
				if p.Went == nil {
					p.Went = make(map[string]fleet.KeyWent, len(load.Went))
				}
				p.Went[k] = fleet.KeyWent{Host: w.Host, At: w.At}
			}
		}
		for j := range p.Endpoints {
			e := &p.Endpoints[j]
			e.InFlightBytes, e.InFlightAdapters = 0, ""
			if ok && !p.LoadAt.IsZero() {
				e.InFlightBytes = load.Bytes[e.Address()]
				if p.LoRA != nil {
					e.InFlightAdapters = strings.Join(load.Adapters[e.Address()], " ")
				}
			}
		}
	}
	return f
}

// reportLoads reports this instance's own figures, and the requests its
// Envoys logged (while it reports, hotSink forwards them), every load
// interval while a pool observes load or logged requests wait, to the
// instance it follows: the followed instance (the ha block's follow),
// else the leader the decisions name, if it advertises its admin
// address. Each answer carries the other instances' figures
// (ha.LoadExchange). A leader reports to nobody.
func (r *Reconciler) reportLoads(ctx context.Context) {
	t := time.NewTimer(r.exchange.Interval())
	defer t.Stop()
	var target string
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		iv := r.exchange.Interval()
		t.Reset(iv)
		next := r.loadTarget()
		r.forwarding.Store(next != "")
		if next != target {
			// A new leader, or none: the last answer came from
			// elsewhere.
			r.exchange.DropUpstream()
			target, failing = next, false
			r.mu.Lock()
			r.ha.loadTo, r.ha.loadErr = target, ""
			r.mu.Unlock()
		}
		if target == "" || !r.load.observing() && !r.exchange.Waiting() {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, max(iv, time.Second))
		err := r.exchange.Report(rctx, r.peerClient, target)
		cancel()
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.ha.loadTo, r.ha.loadErr = target, ""
		if err != nil {
			r.ha.loadErr = err.Error()
		}
		r.mu.Unlock()
		switch {
		case err != nil:
			r.load.reports.WithLabelValues("failed").Inc()
			if !failing {
				r.log.Warn("cannot report requests in flight to the instance followed; serving this instance's own figures once its last answer expires", "url", target, "error", err)
			}
		default:
			r.load.reports.WithLabelValues("sent").Inc()
			if failing {
				r.log.Info("reporting requests in flight again", "url", target)
			}
		}
		failing = err != nil
	}
}

// loadTarget is the admin address this instance reports its figures to,
// "" for none.
func (r *Reconciler) loadTarget() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leadingLocked() {
		return ""
	}
	if f, ok := r.peers.(interface{ LoadURL() string }); ok {
		return f.LoadURL()
	}
	if d := r.ha.remote; d != nil && d.Leader != r.id {
		return d.Admin
	}
	return ""
}

// LoadExchange takes the load reports of the instances that follow this
// one (ha.LoadPath).
func (r *Reconciler) LoadExchange() http.Handler { return r.exchange }

// awayOnly is went without its tombstones (inflight.Went without a host),
// nil if nothing is left.
func awayOnly(went map[string]inflight.Went) map[string]inflight.Went {
	var out map[string]inflight.Went
	for k, w := range went {
		if w.Host == "" {
			continue
		}
		if out == nil {
			out = make(map[string]inflight.Went, len(went))
		}
		out[k] = w
	}
	return out
}

// prefillPools are the pools some decode pool of f names as its prefill
// pool.
func prefillPools(f fleet.Fleet) map[string]bool {
	out := map[string]bool{}
	for _, p := range f.Pools {
		if p.Prefill != nil {
			out[p.Prefill.Pool] = true
		}
	}
	return out
}
