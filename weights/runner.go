package weights

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// scrapeJitter spreads each pool's scrapes over this fraction of its
// interval.
const scrapeJitter = 0.5

// PoolScrape is how one pool is scraped and what its decisions depend on.
// A change of anything but Targets restarts the pool's scraping (and
// forgets its state); a change of Targets only re-points it.
type PoolScrape struct {
	Config  Config
	Profile *Profile
	Scrape
	// Targets are the replicas, ID and URL set; Parse is bound here.
	Targets []Target
	// Seed, if set, are the decisions a pool starts from when its
	// scraping starts: another decider's last ones (see Seed). They are
	// the pool's decisions until its first scrape cycle.
	Seed map[string]Decision
}

// Scrape is when and what a pool's replicas are scraped for: part of a
// policy's metrics block.
type Scrape struct {
	// Model, if set, keeps only series whose model_name label is Model.
	Model string
	// Interval is the time between two scrapes of a replica (at least
	// MinScrapeInterval); Timeout bounds one scrape and is shorter.
	Interval, Timeout time.Duration
}

func (p PoolScrape) sameSettings(o PoolScrape) bool {
	p.Targets, o.Targets, p.Seed, o.Seed = nil, nil, nil, nil
	return reflect.DeepEqual(p, o)
}

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	Logger     hclog.Logger
	Registerer prometheus.Registerer
	// OnChange is called, from a scraping goroutine, whenever a pool's
	// decisions differ from its previous cycle's.
	OnChange func()
	// Now is the clock of decisions and of View's counts; nil means
	// time.Now. Observation times come from the scrapes.
	Now func() time.Time
}

// Runner scrapes every pool that has metrics and keeps each replica's
// latest Decision: the scraping stage of kvxds, between the replicas'
// metric pages and the fleet model.
type Runner struct {
	log      hclog.Logger
	metrics  *runnerMetrics
	reg      prometheus.Registerer
	onChange func()
	now      func() time.Time
	seed     uint64

	mu    sync.Mutex
	pools map[string]*poolRunner
}

// NewRunner returns a Runner scraping nothing yet.
func NewRunner(opts RunnerOptions) *Runner {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	onChange := opts.OnChange
	if onChange == nil {
		onChange = func() {}
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Runner{
		log: log, reg: reg, metrics: newRunnerMetrics(reg), onChange: onChange, now: now,
		seed: jitterSeed(), pools: map[string]*poolRunner{},
	}
}

// Set makes the runner scrape exactly these pools: it starts new ones,
// stops those that are gone, restarts those whose settings changed and
// re-points the rest at their targets. Scraping runs until ctx ends or
// Stop.
func (r *Runner) Set(ctx context.Context, pools map[string]PoolScrape) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, pr := range r.pools {
		if want, ok := pools[name]; !ok || !want.sameSettings(pr.spec) {
			pr.stop()
			delete(r.pools, name)
			r.metrics.forget(name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(pools)) {
		spec := pools[name]
		if err := spec.Config.Validate(); err != nil {
			// A policy's settings passed Validate already; settings
			// from elsewhere would leave every weight at 1.
			r.log.Error("metric-driven weights disabled for pool: invalid settings", "pool", name, "error", err)
			continue
		}
		if spec.Profile == nil {
			r.log.Error("metric-driven weights disabled for pool: no engine profile", "pool", name)
			continue
		}
		pr, ok := r.pools[name]
		if !ok {
			pctx, cancel := context.WithCancel(ctx)
			pr = &poolRunner{
				pool: name, spec: spec, cancel: cancel, done: make(chan struct{}), decisions: maps.Clone(spec.Seed),
				now: r.now, replicas: map[string]*replicaRecord{},
			}
			pr.setTargets(spec.Targets)
			r.pools[name] = pr
			go pr.run(pctx, r.log.With("pool", name), r.reg, r.metrics, r.seed, r.onChange)
			continue
		}
		pr.setTargets(spec.Targets)
	}
}

// Decisions returns every scraped pool's current decisions, by pool then
// replica identity.
func (r *Runner) Decisions() map[string]map[string]Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]map[string]Decision, len(r.pools))
	for name, pr := range r.pools {
		out[name] = pr.decisionsCopy()
	}
	return out
}

// Stop stops every pool's scraping and waits for it.
func (r *Runner) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, pr := range r.pools {
		pr.stop()
		delete(r.pools, name)
	}
}

// jitterSeed differs between kvxds instances, so that several instances
// do not scrape a replica at the same instant.
func jitterSeed() uint64 {
	h := fnv.New64a()
	host, _ := os.Hostname()
	fmt.Fprintf(h, "%s/%d", host, os.Getpid())
	return h.Sum64()
}

// runnerMetrics are kvxds's own metrics about metric-driven routing.
type runnerMetrics struct {
	weight    *prometheus.GaugeVec
	saturated *prometheus.GaugeVec
	cached    *prometheus.GaugeVec
	fallback  *prometheus.GaugeVec
}

func newRunnerMetrics(reg prometheus.Registerer) *runnerMetrics {
	f := promauto.With(reg)
	return &runnerMetrics{
		weight: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_replica_weight_multiplier",
			Help: "Metric-driven weight multiplier of each replica.",
		}, []string{"pool", "replica"}),
		saturated: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_replica_saturated",
			Help: "1 while a replica is out of the hash table for saturation.",
		}, []string{"pool", "replica"}),
		cached: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_replica_prefix_cached_sixteenths",
			Help: "A replica's prefix-cache hit rate in sixteenths as decided (0: unknown); a bound on prompt bytes counts 1 - this/16 of its bytes in flight.",
		}, []string{"pool", "replica"}),
		fallback: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_pool_affinity_fallback",
			Help: "1 while too many replicas of a pool are saturated to take any out (pure affinity).",
		}, []string{"pool"}),
	}
}

// forget drops a pool's series once it is no longer scraped.
func (m *runnerMetrics) forget(pool string) {
	l := prometheus.Labels{"pool": pool}
	m.weight.DeletePartialMatch(l)
	m.saturated.DeletePartialMatch(l)
	m.cached.DeletePartialMatch(l)
	m.fallback.DeletePartialMatch(l)
}

// poolRunner scrapes one pool's replicas and keeps their decisions.
type poolRunner struct {
	pool   string
	spec   PoolScrape
	cancel context.CancelFunc
	done   chan struct{}

	now       func() time.Time
	mu        sync.Mutex
	targets   []Target
	ids       []string
	domains   map[string]string // weight domains by id; nil: one domain
	decisions map[string]Decision
	// What View reports beyond decisions: per replica, and the pool's
	// recent events.
	replicas map[string]*replicaRecord
	fallback bool
	events   eventLog
	changes  []Change // oldest first, at most MaxChanges
}

func (p *poolRunner) stop() {
	p.cancel()
	<-p.done
}

// setTargets points the pool's scrapes at ts, binding the pool's profile.
func (p *poolRunner) setTargets(ts []Target) {
	profile, model := p.spec.Profile, p.spec.Model
	parse := func(body []byte, contentType string) (Signals, error) {
		return ParseSignals(profile, model, body, contentType)
	}
	targets := make([]Target, len(ts))
	ids := make([]string, len(ts))
	var domains map[string]string
	for i, t := range ts {
		t.Parse = parse
		targets[i], ids[i] = t, t.ID
		if t.Domain != "" {
			if domains == nil {
				domains = map[string]string{}
			}
			domains[t.ID] = t.Domain
		}
	}
	p.mu.Lock()
	p.targets, p.ids, p.domains = targets, ids, domains
	p.mu.Unlock()
}

func (p *poolRunner) currentTargets() []Target {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.targets
}

func (p *poolRunner) decisionsCopy() map[string]Decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.decisions)
}

// run scrapes until ctx ends, folding each cycle into decisions and
// calling changed whenever they differ from the previous cycle's.
func (p *poolRunner) run(ctx context.Context, log hclog.Logger, reg prometheus.Registerer, m *runnerMetrics, seed uint64, changed func()) {
	defer close(p.done)
	cfg := p.spec.Config
	scraper := NewScraper(ScraperOptions{
		Timeout:    p.spec.Timeout,
		Logger:     log,
		Registerer: reg,
		Pool:       p.pool,
		JitterSeed: seed,
	})
	out := make(chan []Observation, 1)
	go scraper.Run(ctx, p.spec.Interval, scrapeJitter, p.currentTargets, out)
	var state State
	if p.spec.Seed != nil {
		state = Seed(cfg, p.spec.Seed, p.now())
	}
	fallback := false
	missing := ""
	for {
		var obs []Observation
		select {
		case <-ctx.Done():
			return
		case obs = <-out:
		}
		missing = p.noteMissing(log, obs, missing)
		p.mu.Lock()
		ids, domains := p.ids, p.domains
		p.mu.Unlock()
		now := p.now()
		next, res := StepDomains(cfg, state, ids, domains, obs, now)
		state = next
		p.observe(ids, obs, res, now)
		if res.Fallback != fallback {
			fallback = res.Fallback
			if fallback {
				log.Warn("too many replicas saturated to take any out; falling back to pure affinity",
					"saturated", res.Saturated, "replicas", len(ids), "max_saturated_fraction", cfg.MaxSaturatedFraction)
				m.fallback.WithLabelValues(p.pool).Set(1)
			} else {
				log.Info("saturated replicas are few enough again to be taken out", "saturated", res.Saturated)
				m.fallback.WithLabelValues(p.pool).Set(0)
			}
		}
		p.mu.Lock()
		prev := p.decisions
		p.decisions = res.Decisions
		p.mu.Unlock()
		if reflect.DeepEqual(prev, res.Decisions) {
			continue
		}
		p.record(log, m, prev, res.Decisions)
		changed()
	}
}

// noteMissing logs, once per change, the core signals that the pool's
// engine exports but its replicas' pages lack: without them weights and
// the escape hatch judge by the rest alone, which must not go unsaid.
// prev is what was last logged; it returns what now is.
func (p *poolRunner) noteMissing(log hclog.Logger, obs []Observation, prev string) string {
	var names []string
	var replicas []string
	good := false
	for i := range obs {
		if obs[i].Err != nil {
			continue
		}
		good = true
		m := MissingSignals(p.spec.Profile, obs[i].Signals)
		if len(m) == 0 {
			continue
		}
		replicas = append(replicas, obs[i].ID)
		for _, n := range m {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if !good {
		return prev // nothing was read: no news
	}
	slices.SortFunc(names, func(a, b string) int {
		return slices.Index(SignalNames(), a) - slices.Index(SignalNames(), b)
	})
	now := strings.Join(names, ", ")
	switch {
	case now == prev:
	case now != "":
		args := []any{"missing", now, "replicas", len(replicas), "first", slices.Min(replicas)}
		if h := p.spec.Profile.Hint; h != "" {
			args = append(args, "hint", h)
		}
		log.Warn("replica metrics lack signals their engine exports: weights and saturation are judged without them", args...)
	default:
		log.Info("replica metrics carry every signal their engine exports again")
	}
	return now
}

// record logs and exports what changed between two cycles' decisions.
func (p *poolRunner) record(log hclog.Logger, m *runnerMetrics, prev, next map[string]Decision) {
	for id, dec := range next {
		old, had := prev[id]
		m.weight.WithLabelValues(p.pool, id).Set(float64(dec.Weight))
		sat := 0.0
		if dec.Saturated {
			sat = 1
		}
		m.saturated.WithLabelValues(p.pool, id).Set(sat)
		m.cached.WithLabelValues(p.pool, id).Set(float64(dec.Cached))
		switch {
		case had && !old.Saturated && dec.Saturated:
			log.Info("replica saturated: out of the hash table until it recovers", "replica", id)
		case had && old.Saturated != dec.Saturated:
			log.Info("replica recovered: back in the hash table", "replica", id)
		case had && old.Weight != dec.Weight:
			log.Debug("replica weight changed", "replica", id, "from", old.Weight, "to", dec.Weight)
		}
	}
	for id := range prev {
		if _, ok := next[id]; !ok {
			m.weight.DeleteLabelValues(p.pool, id)
			m.saturated.DeleteLabelValues(p.pool, id)
			m.cached.DeleteLabelValues(p.pool, id)
		}
	}
}

// Metrics is how a pool's replicas are scraped for load signals: a
// policy's metrics block, which the policy decodes into it.
type Metrics struct {
	// Engine is one of Engines().
	Engine string
	// Scrape holds the model filter, and the interval (at least
	// MinScrapeInterval) and timeout (shorter; unset, the shorter of
	// DefaultScrapeTimeout and Interval/2).
	Scrape
	// StaleAfter is how long a replica's last good values are kept after
	// its scrapes start failing; at least Interval.
	StaleAfter time.Duration
	// Path starts with "/"; unset, the engine's (MetricsPath).
	Path string
	// Port is the metrics port; zero means the endpoint's serving port.
	Port uint32
	// Scheme is "http" or "https".
	Scheme string
	// Signals maps signal names (SignalNames) to their source. Set for
	// EngineCustom only, with at least one of queue_depth, running and
	// kv_occupancy.
	Signals map[string]Series
}

// PoolScrape returns how a pool with these metrics, weighting and escape
// settings is scraped, without its targets: an error if the engine and
// signals make no profile.
func (m Metrics) PoolScrape(w Weighting, e Escape) (PoolScrape, error) {
	profile, err := ProfileFor(m.Engine, m.Signals)
	if err != nil {
		return PoolScrape{}, err
	}
	return PoolScrape{
		Config:  Config{Weighting: w, Escape: e, StaleAfter: m.StaleAfter},
		Profile: profile,
		Scrape:  m.Scrape,
	}, nil
}

// URL is the metrics page of a replica serving on host:port: on the
// metrics port, if one is set.
func (m Metrics) URL(host string, port uint32) string {
	if m.Port != 0 {
		port = m.Port
	}
	return m.Scheme + "://" + net.JoinHostPort(host, strconv.FormatUint(uint64(port), 10)) + m.Path
}
