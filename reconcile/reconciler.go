// Package reconcile is the one place where the policy, the replicas that
// discovery finds and the decisions that scraping makes become kvxds's
// fleet model, and where that model is normalised, validated and handed
// to the xDS server, once per change of any input.
//
// Its pure parts (Join, SourceSpecs, ScrapeSpecs, Render) are functions
// of their inputs. The Reconciler runs the stateful edges around them: a
// discovery.Manager for each pool's sources and a weights.Runner for each
// pool's metrics. It fails static: a source that fails keeps its last
// good targets, and a model that does not validate or translate is
// logged and counted while the last good one keeps serving.
package reconcile

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/weights"
	"github.com/kvxds/kvxds/xds/translate"
)

// Sink receives every new model: the xDS server.
type Sink interface {
	Update(context.Context, fleet.Model) error
}

// Options configure a Reconciler.
type Options struct {
	Sink       Sink
	Logger     hclog.Logger
	Registerer prometheus.Registerer
	// SyncTimeout bounds how long a new policy waits for its sources'
	// first answers before it is pushed without them; zero means
	// DefaultSyncTimeout.
	SyncTimeout time.Duration
	// ID is this instance's identity among its peers.
	ID string
	// Peers, if set, elect the instance that decides, or name it; nil
	// means this instance always decides.
	Peers ha.Peers
	// Board, if set, receives the decisions this instance serves, for
	// instances that follow it.
	Board *ha.Board
	// Now is the clock of the status and of scraping decisions; nil
	// means time.Now.
	Now func() time.Time
	// Advertise is this instance's admin address as its peers reach it
	// ("http://host:port"): while it leads, the instances that follow it
	// report their requests in flight there (ha.LoadExchange). Empty
	// means none is advertised; followers of a named instance (the ha
	// block's follow) report to it whatever this says.
	Advertise string
	// PeerClient reaches the other instances' admin servers; nil means
	// http.DefaultClient.
	PeerClient *http.Client
	// NoLoadReports keeps this instance's Envoys' requests in flight to
	// itself, as kvxds did before instances exchanged them: for
	// measuring what the exchange gives (kvxds-bench --instances).
	NoLoadReports bool
}

// DefaultSyncTimeout is Options.SyncTimeout's default.
const DefaultSyncTimeout = 10 * time.Second

// The causes of a push, as kvxds_fleet_updates_total labels them.
const (
	causePolicy    = "policy"
	causeDiscovery = "discovery"
	causeMetrics   = "metrics"
	causeLeader    = "leader" // a leadership change, or the leader's decisions
	causeHotKeys   = "hot_keys"
	causeAdapters  = "adapters"
	causeLoad      = "load" // the pick tables' bytes in flight
)

// Reconciler keeps the fleet model in step with its inputs.
type Reconciler struct {
	log         hclog.Logger
	sink        Sink
	syncTimeout time.Duration
	disc        *discovery.Manager
	scrape      *weights.Runner
	updates     *prometheus.CounterVec
	failures    *prometheus.CounterVec
	moved       *prometheus.CounterVec
	metricsCh   chan struct{}
	haCh        chan struct{}
	id          string
	peers       ha.Peers
	board       *ha.Board
	haMetrics   *haMetrics
	hot         *hotState
	lora        *adapterState
	prefill     *prefillState
	load        *loadState
	exchange    *ha.LoadExchange
	advertise   string
	peerClient  *http.Client
	// noLoadReports is Options.NoLoadReports.
	noLoadReports bool
	// forwarding is set while this instance reports to another: its
	// logged requests go there too (ha.LoadExchange.Forward).
	forwarding atomic.Bool
	now        func() time.Time
	// stageCh asks for a push when a group's stage is due (stageGroups).
	stageCh chan struct{}

	// pushMu serialises pushes, so that a push never reverts a newer
	// policy; mu guards what readers see.
	pushMu     sync.Mutex
	mu         sync.Mutex
	policy     *policy.Policy
	fleet      fleet.Fleet
	ha         haState
	served     ha.Decisions // the decisions of the last push
	servedHot  HotTables    // the hot-key tables of the last push
	servedLoRA Placements   // the adapter placements of the last push
	// The stages of the groups of the last push (nil before the first),
	// and the timer of the next stage due.
	groupStages groupStages
	stageTimer  *time.Timer
	model       fleet.Model             // the model of the last push
	discovered  []discovery.PoolTargets // the discovered replicas of the last push
	// For the status: when each replica entered its health, and its
	// share of gRPC clients' ring, as of the last push.
	since  map[string]map[string]healthSince
	shares map[string]map[string]float64
	// What pushes cost each pool: the last hour's and the latest.
	costs    map[string][]pushCost
	lastCost map[string]pushCost
	// Counting costs, off the push's path: costNext is the model pushed
	// last and not yet counted (guarded by costMu); tables are each hash
	// pool's client tables as last counted, which only countCosts reads.
	costMu     sync.Mutex
	costNext   *fleet.Model
	costServed served
	costAt     time.Time
	costWake   chan struct{}
	costStop   chan struct{}
	stopOnce   sync.Once
	tables     map[string]*poolTables
}

// New returns a Reconciler that has pushed nothing yet.
func New(opts Options) *Reconciler {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	f := promauto.With(reg)
	r := &Reconciler{
		log:           log,
		sink:          opts.Sink,
		syncTimeout:   opts.SyncTimeout,
		disc:          discovery.NewManager(log.Named("discovery"), reg),
		metricsCh:     make(chan struct{}, 1),
		haCh:          make(chan struct{}, 1),
		stageCh:       make(chan struct{}, 1),
		costWake:      make(chan struct{}, 1),
		costStop:      make(chan struct{}),
		id:            opts.ID,
		peers:         opts.Peers,
		board:         opts.Board,
		ha:            haState{reachable: true},
		now:           opts.Now,
		advertise:     opts.Advertise,
		peerClient:    opts.PeerClient,
		noLoadReports: opts.NoLoadReports,
		updates: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_fleet_updates_total",
			Help: "Fleet models pushed, by what changed: policy, discovery, metrics, leader, hot_keys, adapters or load (the pick tables' bytes in flight).",
		}, []string{"cause"}),
		failures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_fleet_update_errors_total",
			Help: "Fleet models not pushed because they did not validate or translate, by what changed; the last good one keeps serving.",
		}, []string{"cause"}),
		moved: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_hash_space_moved_total",
			Help: "Share of a hash table's space, so of its sessions, that changed replica, summed over pushes: by pool, table (the pool's own or a tenant group's cluster), client kind (envoy, grpc, grpc-js), cause (membership, health, weight, policy, mixed) and part (own: to or from a replica that changed; collateral: between replicas that did not).",
		}, []string{"pool", "table", "client", "cause", "part"}),
	}
	if r.syncTimeout <= 0 {
		r.syncTimeout = DefaultSyncTimeout
	}
	if r.board == nil {
		r.board = ha.NewBoard()
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.scrape = weights.NewRunner(weights.RunnerOptions{
		Logger: log.Named("weights"), Registerer: reg, OnChange: r.metricsChanged, Now: r.now,
	})
	r.haMetrics = newHAMetrics(reg, r)
	r.hot = newHotState(reg)
	r.lora = newAdapterState(reg)
	r.prefill = newPrefillState(reg)
	r.exchange = ha.NewLoadExchange(opts.ID, r.now)
	r.exchange.OnObserved(r.absorb)
	r.load = newLoadState(reg, r.exchange)
	if r.peerClient == nil {
		r.peerClient = http.DefaultClient
	}
	for _, c := range []string{causePolicy, causeDiscovery, causeMetrics, causeLeader, causeHotKeys, causeAdapters, causeLoad} {
		r.updates.WithLabelValues(c)
		r.failures.WithLabelValues(c)
	}
	reg.MustRegister(newStatusCollector(r))
	go r.countCosts()
	return r
}

// Apply makes p the policy: it starts, keeps or stops discovery sources
// to match p, waits (up to the sync timeout) for new sources' first
// answers so their pools are not pushed empty, pushes the model and
// points scraping at its replicas. Sources and scraping run until ctx
// ends or Close. On error the previous policy stays in force.
func (r *Reconciler) Apply(ctx context.Context, p *policy.Policy) error {
	// Pushes wait meanwhile: a replaced source's targets are gone until
	// its successor reports, and nothing may push the pool in between.
	r.pushMu.Lock()
	defer r.pushMu.Unlock()
	r.disc.Apply(ctx, SourceSpecs(p, r.log.Named("discovery")))
	wctx, cancel := context.WithTimeout(ctx, r.syncTimeout)
	if err := r.disc.WaitSynced(wctx); err != nil {
		r.log.Warn("some discovery sources have not reported yet; their pools start without them", "waited", r.syncTimeout)
	}
	cancel()
	if err := r.pushLocked(ctx, p, causePolicy); err != nil {
		return err
	}
	r.mu.Lock()
	leading := r.leadingLocked()
	r.mu.Unlock()
	r.haMetrics.setLeading(r, leading)
	return nil
}

// Run pushes the model again whenever discovered replicas, metric
// decisions or the leader's decisions change, and publishes this
// instance's decisions while it leads, until ctx ends.
func (r *Reconciler) Run(ctx context.Context) {
	if r.peers != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			r.peers.Run(ctx, haHandler{r})
		}()
		if !r.noLoadReports {
			reported := make(chan struct{})
			defer func() { <-reported }()
			go func() {
				defer close(reported)
				r.reportLoads(ctx)
			}()
		}
	}
	r.mu.Lock()
	served, servedHot, servedLoRA := r.served, r.servedHot, r.servedLoRA
	r.mu.Unlock()
	r.publish(ctx, served, servedHot, servedLoRA, true)
	// Hot-key tables and adapter placements are decided on their pools'
	// intervals; the timer wakes for the next one due (every second
	// while none is).
	hotTimer := time.NewTimer(time.Second)
	defer hotTimer.Stop()
	for {
		cause := causeDiscovery
		select {
		case <-ctx.Done():
			return
		case <-r.disc.Changed():
		case <-r.metricsCh:
			cause = causeMetrics
		case <-r.haCh:
			cause = causeLeader
		case <-r.stageCh:
			// A group's next stage: it finishes a policy's change.
			cause = causePolicy
		case <-hotTimer.C:
			r.mu.Lock()
			leading := r.leadingLocked()
			r.mu.Unlock()
			now := r.now()
			changed, next := r.hot.decide(now, leading)
			placed, nextLoRA := r.lora.decide(now, leading, r.scrape.View)
			if nextLoRA > 0 && (next <= 0 || nextLoRA < next) {
				next = nextLoRA
			}
			loaded, nextLoad := r.load.decide(now)
			if nextLoad > 0 && (next <= 0 || nextLoad < next) {
				next = nextLoad
			}
			if next <= 0 {
				next = time.Second
			}
			hotTimer.Reset(next)
			switch {
			case changed:
				cause = causeHotKeys
			case placed:
				cause = causeAdapters
			case loaded:
				cause = causeLoad
			default:
				continue
			}
		}
		r.pushMu.Lock()
		err := r.pushLocked(ctx, r.Policy(), cause)
		r.mu.Lock()
		served, servedHot, servedLoRA := r.served, r.servedHot, r.servedLoRA
		r.mu.Unlock()
		r.pushMu.Unlock()
		if err != nil {
			r.log.Error("update not applied; last good configuration keeps serving", "cause", cause, "error", err)
			continue
		}
		// A new leader publishes at once, under its own term, what it
		// serves: its predecessor's decisions.
		r.publish(ctx, served, servedHot, servedLoRA, cause == causeLeader)
	}
}

// Close stops discovery, scraping and the counting of costs.
func (r *Reconciler) Close() {
	r.scrape.Stop()
	r.disc.Stop()
	r.mu.Lock()
	if r.stageTimer != nil {
		r.stageTimer.Stop()
	}
	r.mu.Unlock()
	r.stopOnce.Do(func() { close(r.costStop) })
}

// Policy returns the policy in force (nil before the first Apply).
func (r *Reconciler) Policy() *policy.Policy {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.policy
}

// Fleet returns the fleet model currently served.
func (r *Reconciler) Fleet() fleet.Fleet {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fleet
}

// metricsChanged asks for a push with fresh decisions; bursts coalesce.
func (r *Reconciler) metricsChanged() {
	select {
	case r.metricsCh <- struct{}{}:
	default:
	}
}

// pushLocked joins p with the discovered replicas and the current
// decisions, prepares the model once and hands it to the sink. The
// caller holds pushMu.
func (r *Reconciler) pushLocked(ctx context.Context, p *policy.Policy, cause string) error {
	decisions := r.decisions()
	hot := r.hotTables()
	placements := r.placements()
	discovered := r.disc.Targets()
	now := r.now()
	r.mu.Lock()
	prevStages := r.groupStages
	r.mu.Unlock()
	joined, stages, wake := stageGroups(Join(p, discovered, decisions), prevStages, now)
	m, err := fleet.Prepare(WithLoad(WithAdapters(WithHotKeys(joined, hot), placements), r.load.current()))
	if err == nil {
		err = r.sink.Update(ctx, m)
	}
	if err != nil {
		r.failures.WithLabelValues(cause).Inc()
		return fmt.Errorf("pushing the fleet: %w", err)
	}
	// Replicas' identities and addresses do not depend on decisions, so
	// the pushed model's replicas are the ones to scrape.
	specs, bad := ScrapeSpecs(p, m)
	for pool, err := range bad {
		r.log.Error("metric-driven weights disabled for pool", "pool", pool, "error", err)
	}
	r.scrapeSet(ctx, specs)
	f := m.Fleet()
	// The tables are built from what the sink serves, if it says.
	sv := servedBy(r.sink)
	var shares map[string]map[string]float64
	if s := sv.of(translate.GRPC); s != nil {
		shares = servedShares(m, s)
	} else {
		shares = tableShares(m)
	}
	r.hot.update(f, m.Plan, envoyResources(r.sink, m))
	r.lora.update(f, m.Plan)
	r.prefill.update(f)
	r.load.update(f)
	r.mu.Lock()
	r.groupStages = stages
	if r.stageTimer != nil {
		r.stageTimer.Stop()
		r.stageTimer = nil
	}
	if wake > 0 {
		r.stageTimer = time.AfterFunc(wake, func() {
			select {
			case r.stageCh <- struct{}{}:
			default:
			}
		})
	}
	r.policy, r.fleet, r.served, r.servedHot, r.discovered = p, f, decisions, hot, discovered
	r.servedLoRA, r.model = placements, m
	r.since = trackSince(r.since, f, decisions, now)
	r.shares = shares
	r.mu.Unlock()
	r.countServed(m, sv, now)
	r.updates.WithLabelValues(cause).Inc()
	return nil
}
