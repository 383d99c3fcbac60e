package discovery

import (
	"context"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kvxds/kvxds/fleet"
)

// Spec is one source of one pool. ID names the source and its settings:
// a source whose settings change gets a new ID, so it is restarted, and
// the Manager keeps each ID's targets apart from every other's.
type Spec struct {
	Pool   string
	ID     string
	Source Source
}

// Manager runs the sources of every pool and merges their latest targets
// per pool. It fails static: a source that reports an error keeps its last
// good targets, and the change of state is logged once and counted.
type Manager struct {
	log     hclog.Logger
	metrics *managerMetrics
	changed chan struct{}
	synced  chan struct{} // a source reported for the first time

	mu      sync.Mutex
	running map[string]*runningSource // by Spec.ID
	dupes   map[string]bool           // duplicate addresses already reported
}

type runningSource struct {
	spec     Spec
	cancel   context.CancelFunc
	done     chan struct{}
	targets  []fleet.Endpoint // last good; nil until the first good update
	synced   bool             // a good update arrived
	reported bool             // any update arrived
	failing  bool
}

// NewManager returns a Manager with no sources; reg may be nil.
func NewManager(logger hclog.Logger, reg prometheus.Registerer) *Manager {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Manager{
		log:     logger,
		metrics: newManagerMetrics(reg),
		changed: make(chan struct{}, 1),
		synced:  make(chan struct{}, 1),
		running: map[string]*runningSource{},
		dupes:   map[string]bool{},
	}
}

// Changed receives a value after the merged targets may have changed;
// bursts coalesce into one.
func (m *Manager) Changed() <-chan struct{} { return m.changed }

func (m *Manager) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Apply runs exactly the given sources: it starts those it does not run
// yet, stops those no longer given (their targets go with them), and
// leaves the rest running with their targets. Sources stop when ctx is
// done.
func (m *Manager) Apply(ctx context.Context, specs []Spec) {
	want := map[string]Spec{}
	for _, s := range specs {
		want[s.ID] = s
	}
	m.mu.Lock()
	var stopped []*runningSource
	for id, r := range m.running {
		if _, ok := want[id]; !ok {
			r.cancel()
			stopped = append(stopped, r)
			delete(m.running, id)
			m.metrics.forget(r.spec)
		}
	}
	for id, s := range want {
		if _, ok := m.running[id]; ok {
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		r := &runningSource{spec: s, cancel: cancel, done: make(chan struct{})}
		m.running[id] = r
		go m.run(sctx, r)
	}
	m.mu.Unlock()
	for _, r := range stopped {
		<-r.done
	}
	if len(stopped) > 0 {
		m.notify()
	}
}

// WaitSynced returns when every running source has reported once (its
// targets, or that it cannot tell), or when ctx is done: pushing a pool
// before its sources know it would empty it for a moment and move its
// sessions.
func (m *Manager) WaitSynced(ctx context.Context) error {
	for {
		m.mu.Lock()
		synced := true
		for _, r := range m.running {
			synced = synced && r.reported
		}
		m.mu.Unlock()
		if synced {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.synced:
		}
	}
}

// Stop stops every source.
func (m *Manager) Stop() { m.Apply(context.Background(), nil) }

func (m *Manager) run(ctx context.Context, r *runningSource) {
	defer close(r.done)
	up := make(chan Update)
	go func() {
		r.spec.Source.Run(ctx, up)
		close(up)
	}()
	log := m.log.With("pool", r.spec.Pool, "source", r.spec.ID)
	for u := range up {
		if ctx.Err() != nil {
			continue // drain until the source returns
		}
		m.mu.Lock()
		if !r.reported {
			r.reported = true
			select {
			case m.synced <- struct{}{}:
			default:
			}
		}
		if u.Err != nil {
			m.metrics.errors.WithLabelValues(r.spec.Pool, r.spec.ID).Inc()
			m.metrics.up.WithLabelValues(r.spec.Pool, r.spec.ID).Set(0)
			if !r.failing {
				r.failing = true
				log.Warn("discovery failing; keeping the last good targets", "targets", len(r.targets), "error", u.Err)
			}
			m.mu.Unlock()
			continue
		}
		m.metrics.up.WithLabelValues(r.spec.Pool, r.spec.ID).Set(1)
		if r.failing {
			r.failing = false
			log.Info("discovery recovered", "targets", len(u.Targets))
		}
		ts := slices.Clone(u.Targets)
		SortTargets(ts)
		same := r.synced && slices.Equal(ts, r.targets)
		r.targets, r.synced = ts, true
		m.metrics.targets.WithLabelValues(r.spec.Pool, r.spec.ID).Set(float64(len(ts)))
		m.mu.Unlock()
		if !same {
			m.notify()
		}
	}
}

// Targets returns the merged targets of every pool that has a source, in
// pool order, each sorted by address. Sources are merged in ID order; an
// address a later source also reports is kept once, from the first (whose
// ID Sources holds), and logged once.
func (m *Manager) Targets() []PoolTargets {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.running))
	for id := range m.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	byPool := map[string]*PoolTargets{}
	var pools []string
	for _, id := range ids {
		r := m.running[id]
		p := r.spec.Pool
		pt, ok := byPool[p]
		if !ok {
			pools = append(pools, p)
			pt = &PoolTargets{Pool: p, Sources: map[string]string{}}
			byPool[p] = pt
		}
		for _, t := range r.targets {
			a := t.Address()
			if first, ok := pt.Sources[a]; ok {
				if dk := p + "\x00" + a + "\x00" + id; !m.dupes[dk] {
					m.dupes[dk] = true
					m.log.Warn("replica found by two sources; keeping the first", "pool", p, "address", a, "first", first, "also", id)
				}
				continue
			}
			pt.Sources[a] = id
			pt.Targets = append(pt.Targets, t)
		}
	}
	slices.Sort(pools)
	out := make([]PoolTargets, 0, len(pools))
	for _, p := range pools {
		pt := byPool[p]
		SortTargets(pt.Targets)
		out = append(out, *pt)
	}
	return out
}

type managerMetrics struct {
	errors  *prometheus.CounterVec
	up      *prometheus.GaugeVec
	targets *prometheus.GaugeVec
}

func newManagerMetrics(reg prometheus.Registerer) *managerMetrics {
	f := promauto.With(reg)
	return &managerMetrics{
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_discovery_errors_total",
			Help: "Failed discovery attempts, by pool and source; the last good targets keep serving.",
		}, []string{"pool", "source"}),
		up: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_discovery_source_up",
			Help: "1 if the source's last attempt succeeded, 0 if it is serving its last good targets.",
		}, []string{"pool", "source"}),
		targets: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_discovery_targets",
			Help: "Replicas the source last reported.",
		}, []string{"pool", "source"}),
	}
}

func (m *managerMetrics) forget(s Spec) {
	m.errors.DeleteLabelValues(s.Pool, s.ID)
	m.up.DeleteLabelValues(s.Pool, s.ID)
	m.targets.DeleteLabelValues(s.Pool, s.ID)
}
