package reconcile

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/weights"
)

// haState is what this instance knows of the other instances. Without
// peers an instance always leads.
type haState struct {
	leading bool
	term    int64
	// remote is the leader's last document, applied while following.
	remote *ha.Document
	// seed are the decisions to start scraping from after gaining the
	// lead: the previous leader's last ones. Consumed by the next push.
	seed ha.Decisions
	// published is the last document this instance published.
	published *ha.Document
	// reachable is false while the decisions' source cannot be reached.
	reachable bool
	lastErr   string
	// loadTo is where this instance reports its requests in flight,
	// loadErr why its last report failed.
	loadTo, loadErr string
}

// HAStatus is how this instance takes part in high availability (also
// part of the status read model).
type HAStatus = status.HA

// HA returns this instance's part in high availability.
func (r *Reconciler) HA() HAStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A standalone instance decides for itself: it leads.
	st := HAStatus{Mode: "standalone", Leading: r.leadingLocked(), Term: r.ha.term, Reachable: r.ha.reachable, Error: r.ha.lastErr,
		LoadReporters: r.exchange.Reporters(), LoadReportsTo: r.ha.loadTo, LoadReportError: r.ha.loadErr}
	if r.peers != nil {
		st.Mode = r.peers.Describe()
	}
	switch {
	case st.Leading:
		st.Leader = r.id
		if r.ha.published != nil {
			st.DecisionsTime = r.ha.published.Time
		}
	case r.ha.remote != nil:
		st.Leader, st.DecisionsTime = r.ha.remote.Leader, r.ha.remote.Time
	}
	return st
}

// leading reports whether this instance decides.
func (r *Reconciler) leadingLocked() bool { return r.peers == nil || r.ha.leading }

// decisions returns the decisions to serve: this instance's own while it
// leads, else the leader's last published ones. The caller holds pushMu.
func (r *Reconciler) decisions() ha.Decisions {
	r.mu.Lock()
	leading, remote, seed := r.leadingLocked(), r.ha.remote, r.ha.seed
	r.mu.Unlock()
	if leading {
		d := r.scrape.Decisions()
		// Pools whose scraping starts with this push serve the
		// previous leader's decisions, which they start from.
		for pool, s := range seed {
			if _, ok := d[pool]; !ok {
				d[pool] = s
			}
		}
		return d
	}
	if remote != nil {
		return remote.Pools
	}
	return nil
}

// hotTables returns the hot-key tables to serve: this instance's own
// while it leads, else the leader's last published ones.
func (r *Reconciler) hotTables() HotTables {
	r.mu.Lock()
	leading, remote := r.leadingLocked(), r.ha.remote
	r.mu.Unlock()
	if leading {
		return r.hot.ownTables()
	}
	if remote != nil {
		return remote.HotKeys
	}
	return nil
}

// placements returns the adapter placements to serve: this instance's
// own while it leads, else the leader's last published ones.
func (r *Reconciler) placements() Placements {
	r.mu.Lock()
	leading, remote := r.leadingLocked(), r.ha.remote
	r.mu.Unlock()
	if leading {
		return r.lora.ownPlacements()
	}
	if remote != nil {
		return remote.Adapters
	}
	return nil
}

// scrapeSet points scraping at specs while this instance leads (seeding
// pools that start with the previous leader's decisions) and stops it
// otherwise. The caller holds pushMu.
func (r *Reconciler) scrapeSet(ctx context.Context, specs map[string]weights.PoolScrape) {
	r.mu.Lock()
	leading, seed := r.leadingLocked(), r.ha.seed
	r.ha.seed = nil
	r.mu.Unlock()
	if !leading {
		r.scrape.Set(ctx, nil)
		return
	}
	for pool, spec := range specs {
		if s, ok := seed[pool]; ok {
			spec.Seed = s
			specs[pool] = spec
		}
	}
	r.scrape.Set(ctx, specs)
}

// publish publishes the decisions, hot-key tables and adapter placements
// served, if this instance leads and they changed since it last did (or
// force).
func (r *Reconciler) publish(ctx context.Context, served ha.Decisions, hot HotTables, lora Placements, force bool) {
	r.mu.Lock()
	if !r.leadingLocked() || (!force && r.ha.published != nil && reflect.DeepEqual(r.ha.published.Pools, served) &&
		reflect.DeepEqual(cloneHot(r.ha.published.HotKeys), cloneHot(hot)) &&
		reflect.DeepEqual(clonePlacements(r.ha.published.Adapters), clonePlacements(lora))) {
		r.mu.Unlock()
		return
	}
	doc := ha.Document{Leader: r.id, Term: r.ha.term, Time: time.Now().UTC(), Pools: cloneDecisions(served), Admin: r.advertise}
	if len(hot) > 0 {
		doc.HotKeys = cloneHot(hot)
	}
	if c := clonePlacements(lora); len(c) > 0 {
		doc.Adapters = c
	}
	r.ha.published = &doc
	r.mu.Unlock()
	r.board.Set(doc)
	if r.peers == nil {
		return
	}
	if err := r.peers.Publish(ctx, doc); err != nil {
		lvl := r.log.Error
		if errors.Is(err, ha.ErrNotLeader) {
			lvl = r.log.Warn
		}
		lvl("decisions not published", "error", err)
		r.haMetrics.publishErrors.Inc()
		return
	}
	r.haMetrics.published.Inc()
}

func cloneDecisions(d ha.Decisions) ha.Decisions {
	out := make(ha.Decisions, len(d))
	for pool, m := range d {
		out[pool] = maps.Clone(m)
	}
	return out
}

// haHandler receives what the peers say.
type haHandler struct{ r *Reconciler }

func (h haHandler) Leading(leading bool, term int64) {
	r := h.r
	r.mu.Lock()
	was := r.ha.leading
	r.ha.leading, r.ha.term = leading, term
	switch {
	case leading && !was:
		// Start from what is served now: the previous leader's
		// decisions, so that the change of leader moves no key.
		if r.ha.remote != nil {
			r.ha.seed = cloneDecisions(r.ha.remote.Pools)
			r.hot.seed(r.ha.remote.HotKeys, r.now())
			r.lora.seed(r.ha.remote.Adapters, r.now())
		}
		r.log.Info("leading: scraping and deciding", "term", term)
		r.haMetrics.changes.Inc()
	case !leading && was:
		// Keep serving this instance's last decisions until the next
		// leader publishes its own (or the previous leader's, if this
		// one lost the lead before it published).
		if p := r.ha.published; p != nil && (r.ha.remote == nil || !p.Time.Before(r.ha.remote.Time)) {
			r.ha.remote = p
		}
		r.log.Info("no longer leading: serving the leader's decisions", "term", term)
		r.haMetrics.changes.Inc()
	}
	r.mu.Unlock()
	r.haMetrics.setLeading(r, leading)
	r.wake(r.haCh)
}

func (h haHandler) Published(doc ha.Document) {
	r := h.r
	r.mu.Lock()
	r.ha.reachable, r.ha.lastErr = true, ""
	switch {
	case r.ha.leading:
		// Its own document, or a deposed leader's late one.
	case r.ha.remote != nil && doc.Term < r.ha.remote.Term:
		r.log.Warn("ignoring decisions of an older term", "leader", doc.Leader, "term", doc.Term, "current", r.ha.remote.Term)
	default:
		if r.ha.remote == nil || r.ha.remote.Leader != doc.Leader || r.ha.remote.Term != doc.Term {
			r.log.Info("serving the leader's decisions", "leader", doc.Leader, "term", doc.Term)
		}
		r.ha.remote = &doc
		r.mu.Unlock()
		r.board.Set(doc)
		r.wake(r.haCh)
		return
	}
	r.mu.Unlock()
}

// Reach records whether the decisions' source could be reached.
func (r *Reconciler) Reach(ok bool, err error) {
	r.mu.Lock()
	r.ha.reachable = ok
	r.ha.lastErr = ""
	if err != nil {
		r.ha.lastErr = err.Error()
	}
	r.mu.Unlock()
}

func (r *Reconciler) wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// haMetrics are kvxds's own metrics about high availability.
type haMetrics struct {
	leader        *prometheus.GaugeVec
	changes       prometheus.Counter
	published     prometheus.Counter
	publishErrors prometheus.Counter
}

func newHAMetrics(reg prometheus.Registerer, r *Reconciler) *haMetrics {
	f := promauto.With(reg)
	m := &haMetrics{
		leader: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_leader",
			Help: "1 for each pool while this instance scrapes and decides its weights (the leader, or a standalone instance).",
		}, []string{"pool"}),
		changes: f.NewCounter(prometheus.CounterOpts{
			Name: "kvxds_ha_leadership_changes_total",
			Help: "Times this instance started or stopped leading.",
		}),
		published: f.NewCounter(prometheus.CounterOpts{
			Name: "kvxds_ha_decisions_published_total",
			Help: "Decision documents this instance published for the others.",
		}),
		publishErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "kvxds_ha_publish_errors_total",
			Help: "Decision documents this instance failed to publish.",
		}),
	}
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kvxds_ha_decisions_age_seconds",
		Help: "Age of the decisions served: time since their leader published them (0 before any).",
	}, func() float64 {
		t := r.HA().DecisionsTime
		if t.IsZero() {
			return 0
		}
		return time.Since(t).Seconds()
	})
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kvxds_ha_source_up",
		Help: "1 while the published decisions can be reached (always 1 for a leader).",
	}, func() float64 {
		if st := r.HA(); st.Leading || st.Reachable || st.Mode == "standalone" {
			return 1
		}
		return 0
	})
	return m
}

// setLeading sets kvxds_leader for the pools of the current policy.
func (m *haMetrics) setLeading(r *Reconciler, leading bool) {
	p := r.Policy()
	m.leader.Reset()
	if p == nil {
		return
	}
	v := 0.0
	if leading {
		v = 1
	}
	for _, pool := range p.Pools {
		m.leader.WithLabelValues(pool.Name).Set(v)
	}
}
