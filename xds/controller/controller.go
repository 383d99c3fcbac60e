// Package controller is the kvxds process: it loads and watches the
// policy, joins it with discovery into the fleet model, hands the model to
// the xDS server, and serves the admin endpoints (/metrics, /healthz,
// /readyz, /debug/fleet).
//
// It fails static: an invalid policy edit or a fleet that does not
// translate is logged and counted, and the last good configuration keeps
// serving. Only the first policy must be valid, or the process does not
// start.
package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/weights"
	"github.com/kvxds/kvxds/xds/fleet"
	"github.com/kvxds/kvxds/xds/server"
)

// Options configure a Controller.
type Options struct {
	// PolicyFile is watched and hot-reloaded. If empty, PolicySource is
	// served as it is, without reloads.
	PolicyFile   string
	PolicySource []byte
	// PolicyName names PolicySource in diagnostics and logs.
	PolicyName string
	// XDSAddress and AdminAddress override the policy's addresses.
	XDSAddress   string
	AdminAddress string
	Logger       hclog.Logger
	// Version is reported on /debug/fleet and the build info metric.
	Version string
}

// Controller runs one kvxds instance.
type Controller struct {
	opts     Options
	log      hclog.Logger
	registry *prometheus.Registry
	xds      *server.Server
	disc     *discovery.Manager

	xdsLis, adminLis net.Listener

	mu      sync.Mutex
	policy  *policy.Policy
	fleet   fleet.Fleet
	updates prometheus.Counter

	// updateMu serialises pushes; base is the fleet of the current
	// policy before metric-driven decisions.
	updateMu   sync.Mutex
	base       fleet.Fleet
	dynamics   map[string]*poolDynamics
	dynMetrics *dynamicMetrics
	rebuildCh  chan struct{}
}

// New loads the initial policy and prepares the server. It returns the
// policy's diagnostics as an error if the policy is invalid.
func New(opts Options) (*Controller, error) {
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	var p *policy.Policy
	var diags hcl.Diagnostics
	if opts.PolicyFile != "" {
		p, diags = policy.Load(opts.PolicyFile)
	} else {
		p, diags = policy.Parse(opts.PolicySource, cmp.Or(opts.PolicyName, "embedded policy"))
	}
	if diags.HasErrors() {
		return nil, &PolicyError{Diagnostics: diags}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "kvxds_build_info",
		Help:        "kvxds build information.",
		ConstLabels: prometheus.Labels{"version": opts.Version},
	})
	buildInfo.Set(1)
	c := &Controller{
		opts:       opts,
		log:        logger,
		registry:   reg,
		xds:        server.New(server.Options{Logger: logger.Named("xds"), Registerer: reg}),
		disc:       discovery.NewManager(logger.Named("discovery"), reg),
		policy:     p,
		dynamics:   map[string]*poolDynamics{},
		dynMetrics: newDynamicMetrics(reg),
		rebuildCh:  make(chan struct{}, 1),
		updates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvxds_fleet_updates_total",
			Help: "Fleet models built from a new policy or discovery result.",
		}),
	}
	reg.MustRegister(buildInfo, c.updates)
	return c, nil
}

// PolicyError is an invalid initial policy.
type PolicyError struct{ Diagnostics hcl.Diagnostics }

func (e *PolicyError) Error() string {
	return "invalid policy:\n" + strings.TrimRight(policy.Format(e.Diagnostics), "\n")
}

// Listen binds the xDS and admin addresses. Run calls it if needed; call
// it first to learn the addresses when they use port 0.
func (c *Controller) Listen() error {
	if c.xdsLis != nil {
		return nil
	}
	xdsAddr := cmp.Or(c.opts.XDSAddress, c.policy.XDSAddress)
	adminAddr := cmp.Or(c.opts.AdminAddress, c.policy.AdminAddress)
	xl, err := net.Listen("tcp", xdsAddr)
	if err != nil {
		return fmt.Errorf("listening for xDS on %s: %w", xdsAddr, err)
	}
	al, err := net.Listen("tcp", adminAddr)
	if err != nil {
		xl.Close()
		return fmt.Errorf("listening for admin on %s: %w", adminAddr, err)
	}
	c.xdsLis, c.adminLis = xl, al
	return nil
}

// XDSAddr is the bound xDS address (after Listen).
func (c *Controller) XDSAddr() string { return c.xdsLis.Addr().String() }

// AdminAddr is the bound admin address (after Listen).
func (c *Controller) AdminAddr() string { return c.adminLis.Addr().String() }

// Registry holds kvxds's own metrics.
func (c *Controller) Registry() *prometheus.Registry { return c.registry }

// Server is the xDS server.
func (c *Controller) Server() *server.Server { return c.xds }

// Fleet returns the fleet model currently served.
func (c *Controller) Fleet() fleet.Fleet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fleet
}

// Run serves until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.Listen(); err != nil {
		return err
	}
	serving := false
	defer func() {
		if !serving { // the servers close them once they run
			c.xdsLis.Close()
			c.adminLis.Close()
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer c.stopDynamics()
	defer c.disc.Stop()
	if err := c.apply(ctx, c.policy); err != nil {
		return fmt.Errorf("initial configuration: %w", err)
	}
	var w *policy.Watcher
	if c.opts.PolicyFile != "" {
		var err error
		w, err = policy.NewWatcher(c.opts.PolicyFile, policy.WatcherOptions{
			Logger:     c.log.Named("policy"),
			Registerer: c.registry,
			OnReload: func(p *policy.Policy) {
				if err := c.apply(ctx, p); err != nil {
					c.log.Error("policy reload not applied; last good configuration keeps serving", "error", err)
				}
			},
		})
		if err != nil {
			return fmt.Errorf("watching policy: %w", err)
		}
	}

	g := grpc.NewServer(
		// Data planes keep their ADS stream for days: probe dead peers,
		// and let clients ping as often as Envoy's defaults do.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	c.xds.Register(g)
	admin := &http.Server{Handler: c.adminHandler(), ReadHeaderTimeout: 10 * time.Second}

	errc := make(chan error, 3)
	var wg sync.WaitGroup
	serving = true
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := g.Serve(c.xdsLis); err != nil {
			errc <- fmt.Errorf("xDS server: %w", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := admin.Serve(c.adminLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("admin server: %w", err)
		}
	}()
	wg.Add(2)
	go func() {
		defer wg.Done()
		c.rebuildLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		c.discoveryLoop(ctx)
	}()
	if w != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("policy watcher: %w", err)
			}
		}()
	}
	c.log.Info("serving", "xds", c.XDSAddr(), "admin", c.AdminAddr(), "policy", c.currentPolicy().Filename)

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	admin.Shutdown(shutdown)
	// Stop, not GracefulStop: ADS streams never end on their own.
	g.Stop()
	wg.Wait()
	return err
}

// stopDynamics stops every pool's scraping.
func (c *Controller) stopDynamics() {
	c.updateMu.Lock()
	defer c.updateMu.Unlock()
	for name, d := range c.dynamics {
		d.cancel()
		<-d.done
		delete(c.dynamics, name)
	}
}

// apply joins a policy into a fleet and pushes it, then points each
// pool's metric scrapes at its replicas.
func (c *Controller) apply(ctx context.Context, p *policy.Policy) error {
	c.mu.Lock()
	old := c.policy
	c.mu.Unlock()
	if old != nil && p != old && (p.XDSAddress != old.XDSAddress || p.AdminAddress != old.AdminAddress) {
		c.log.Warn("xds/admin address changes take effect on restart", "xds", p.XDSAddress, "admin", p.AdminAddress)
	}
	// Sources kept across the reload keep their targets; new ones get a
	// moment to report, so that their pools are not pushed empty. Pushes
	// wait meanwhile: a replaced source's targets are gone until its
	// successor reports, and nothing may push the pool in between.
	c.updateMu.Lock()
	defer c.updateMu.Unlock()
	c.disc.Apply(ctx, sourceSpecs(p, c.log.Named("discovery")))
	wctx, cancel := context.WithTimeout(ctx, discoverySyncTimeout)
	if err := c.disc.WaitSynced(wctx); err != nil {
		c.log.Warn("some discovery sources have not reported yet; their pools start without them", "waited", discoverySyncTimeout)
	}
	cancel()
	if err := c.pushLocked(ctx, p); err != nil {
		return err
	}
	c.log.Info("configuration applied", "pools", len(p.Pools), "policy", p.Filename)
	return nil
}

// discoverySyncTimeout bounds how long a new configuration waits for its
// sources' first answers.
const discoverySyncTimeout = 10 * time.Second

// push joins the current policy with the discovered replicas and the
// current decisions and hands the fleet to the xDS server. Pushes are
// serialised, and the policy is read under the same lock, so a push never
// reverts a newer policy.
func (c *Controller) push(ctx context.Context) error {
	c.updateMu.Lock()
	defer c.updateMu.Unlock()
	return c.pushLocked(ctx, c.currentPolicy())
}

// pushLocked is the one place where policy, discovered replicas and
// metric decisions meet. The caller holds updateMu.
func (c *Controller) pushLocked(ctx context.Context, p *policy.Policy) error {
	base := Join(p, c.disc.Groups())
	f := applyDecisions(base, c.decisionsLocked())
	if err := c.xds.Update(ctx, f); err != nil {
		return err
	}
	c.base = base
	c.reconcileDynamicsLocked(ctx, p, base)
	c.mu.Lock()
	c.policy, c.fleet = p, f
	c.mu.Unlock()
	c.updates.Inc()
	return nil
}

// discoveryLoop pushes the fleet again whenever a source's replicas
// change.
func (c *Controller) discoveryLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.disc.Changed():
		}
		if err := c.push(ctx); err != nil {
			c.log.Error("discovered replicas not applied; last good configuration keeps serving", "error", err)
		}
	}
}

// reconcileDynamicsLocked starts scraping pools that gained a metrics
// block, stops those that lost it, restarts those whose settings changed,
// and re-targets the rest.
func (c *Controller) reconcileDynamicsLocked(ctx context.Context, p *policy.Policy, base fleet.Fleet) {
	pools := map[string]fleet.Pool{}
	for _, fp := range base.Pools {
		pools[fp.Name] = fp
	}
	want := map[string]poolSpec{}
	for _, pp := range p.Pools {
		spec, ok := specOf(pp)
		if !ok {
			continue
		}
		// The policy package validates these values; this guards the
		// two packages drifting apart.
		if err := configOf(spec).Validate(); err != nil {
			c.log.Error("metric-driven weights disabled for pool: invalid settings", "pool", pp.Name, "error", err)
			continue
		}
		want[pp.Name] = spec
	}
	for name, d := range c.dynamics {
		if spec, ok := want[name]; !ok || !reflect.DeepEqual(spec, d.spec) {
			d.cancel()
			<-d.done
			delete(c.dynamics, name)
			c.dynMetrics.forget(name)
		}
	}
	for name, spec := range want {
		d, ok := c.dynamics[name]
		if !ok {
			dctx, cancel := context.WithCancel(ctx)
			d = &poolDynamics{pool: name, spec: spec, cancel: cancel, done: make(chan struct{})}
			d.setTargets(pools[name])
			c.dynamics[name] = d
			go d.run(dctx, c.log.Named("weights").With("pool", name), c.dynMetrics, c.requestRebuild)
			continue
		}
		d.setTargets(pools[name])
	}
}

func (c *Controller) currentPolicy() *policy.Policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.policy
}

func (c *Controller) decisionsLocked() map[string]map[string]weights.Decision {
	out := make(map[string]map[string]weights.Decision, len(c.dynamics))
	for name, d := range c.dynamics {
		out[name] = d.Decisions()
	}
	return out
}

// requestRebuild asks for the fleet to be rebuilt with fresh decisions;
// bursts coalesce into one rebuild.
func (c *Controller) requestRebuild() {
	select {
	case c.rebuildCh <- struct{}{}:
	default:
	}
}

func (c *Controller) rebuildLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.rebuildCh:
		}
		c.updateMu.Lock()
		f := applyDecisions(c.base, c.decisionsLocked())
		err := c.xds.Update(ctx, f)
		c.updateMu.Unlock()
		if err != nil {
			c.log.Error("metric-driven update not applied; last good configuration keeps serving", "error", err)
			continue
		}
		c.mu.Lock()
		c.fleet = f
		c.mu.Unlock()
	}
}

func (c *Controller) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.registry, promhttp.HandlerOpts{Registry: c.registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !c.xds.Ready() {
			http.Error(w, "no configuration yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /debug/fleet", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(c.Fleet())
	})
	return mux
}
