// Package controller is the kvxds process: it loads and watches the
// policy, hands every valid version of it to the reconcile step (which
// joins it with discovery and metrics into the fleet model and pushes
// that to the xDS server), and serves xDS and the admin endpoints
// (/metrics, /healthz, /readyz, /api/v1/status, /debug/fleet).
//
// It fails static: an invalid policy edit or a fleet that does not
// translate is logged and counted, and the last good configuration keeps
// serving. Only the first policy must be valid, or the process does not
// start.
//
// Both servers may speak TLS with certificates that follow their files on
// disk (package certs), the admin server may require a bearer token, and
// the xDS server caps the streams of each source address (security.go).
package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/ha"
	hakube "github.com/kvxds/kvxds/ha/kubernetes"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/reconcile"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/status/page"
	"github.com/kvxds/kvxds/xds/accesslog"
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
	// ID is this instance's identity among kvxds instances (the policy's
	// ha block); empty means $POD_NAME, else the hostname.
	ID string
	// Advertise is the admin address other instances reach this one at
	// ("http://host:port"), where, while it leads, they report their
	// Envoys' requests in flight; empty means http(s)://$POD_IP:port of
	// the admin address when $POD_IP is set, else none.
	Advertise string
	// NoLoadReports is reconcile.Options.NoLoadReports: measurements only.
	NoLoadReports bool
}

// Controller runs one kvxds instance.
type Controller struct {
	opts      Options
	log       hclog.Logger
	registry  *prometheus.Registry
	xds       *server.Server
	reconcile *reconcile.Reconciler
	board     *ha.Board
	initial   *policy.Policy
	security  *security
	accessLog *accesslog.Service

	xdsLis, adminLis net.Listener
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
	promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Name:        "kvxds_build_info",
		Help:        "kvxds build information.",
		ConstLabels: prometheus.Labels{"version": opts.Version},
	}).Set(1)
	xdsServer := server.New(server.Options{Logger: logger.Named("xds"), Registerer: reg})
	sec, err := newSecurity(p, reg, logger)
	if err != nil {
		return nil, err
	}
	id := instanceID(opts.ID)
	peers, reach, err := newPeers(p.HA, id, logger.Named("ha"))
	if err != nil {
		return nil, fmt.Errorf("ha: %w", err)
	}
	sec.follow(peers)
	c := &Controller{
		opts:     opts,
		log:      logger,
		registry: reg,
		xds:      xdsServer,
		board:    ha.NewBoard(),
		initial:  p,
		security: sec,
	}
	c.reconcile = reconcile.New(reconcile.Options{
		Sink: xdsServer, Logger: logger, Registerer: reg,
		ID: id, Peers: peers, Board: c.board,
		Advertise:     advertise(opts.Advertise, cmp.Or(opts.AdminAddress, p.AdminAddress), sec.adminCerts != nil),
		PeerClient:    sec.peerClient(peers),
		NoLoadReports: opts.NoLoadReports,
	})
	if reach != nil {
		*reach = c.reconcile.Reach
	}
	c.accessLog = accesslog.New(accesslog.Options{
		Sink: c.reconcile.AccessLogSink(), Load: c.reconcile.LoadSink(), Logger: logger.Named("accesslog"), Registerer: reg,
	})
	return c, nil
}

// advertise is the admin address other instances reach this one at: the
// flag, else $POD_IP (Kubernetes' downward API) with admin's port, else
// none.
func advertise(flag, admin string, tls bool) string {
	if flag != "" {
		return strings.TrimRight(flag, "/")
	}
	ip := os.Getenv("POD_IP")
	_, port, err := net.SplitHostPort(admin)
	if ip == "" || err != nil || port == "0" {
		return ""
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(ip, port)
}

// instanceID is the --id flag, else $POD_NAME, else the hostname.
func instanceID(flag string) string {
	host, _ := os.Hostname()
	return cmp.Or(flag, os.Getenv("POD_NAME"), host, "kvxds")
}

// newPeers connects this instance with the others as the ha block says;
// none without one. reach is where to put the callback told whether the
// published decisions can be reached.
func newPeers(h *policy.HA, id string, log hclog.Logger) (peers ha.Peers, reach *func(bool, error), err error) {
	switch {
	case h == nil:
		return nil, nil, nil
	case h.Follow != "":
		f := &ha.Follower{URL: h.Follow, Logger: log}
		return f, &f.OnReach, nil
	default:
		cfg := *h.Kubernetes
		cfg.ID = id
		p, err := hakube.New(cfg, log)
		if err != nil {
			return nil, nil, err
		}
		return p, &p.OnReach, nil
	}
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
	xdsAddr := cmp.Or(c.opts.XDSAddress, c.initial.XDSAddress)
	adminAddr := cmp.Or(c.opts.AdminAddress, c.initial.AdminAddress)
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
func (c *Controller) Fleet() fleet.Fleet { return c.reconcile.Fleet() }

// Status returns the read model GET /api/v1/status serves: the reconcile
// step's pools and replicas, with the data planes connected to the xDS
// server and the versions it serves.
func (c *Controller) Status() status.Status {
	st := c.reconcile.Status()
	st.Instance.Version = c.opts.Version
	st.Served = c.xds.Served()
	st.DataPlanes = c.xds.DataPlanes()
	return st
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
	defer c.reconcile.Close()
	if err := c.apply(ctx, c.initial); err != nil {
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

	// A client that stops reading loses its connection instead of holding
	// a stream's goroutine forever (see server.Listener).
	g := grpc.NewServer(append(c.security.grpcOptions(c.initial.XDS), c.xds.GRPCOptions()...)...)
	c.xds.Register(g)
	// Envoys stream the requests they route to the same server, under
	// the same TLS and stream caps: the hot keys' source.
	c.accessLog.Register(g)
	// Envoy health-checks the kvxds instances its bootstrap lists
	// (grpc.health.v1): this one serves a configuration by now.
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	defer hs.Shutdown()
	admin := &http.Server{
		Handler: c.security.adminHandler(c.adminHandler()), ReadHeaderTimeout: 10 * time.Second,
		// Requests end with the process: long polls of followers too.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}

	errc := make(chan error, 5)
	var wg sync.WaitGroup
	serving = true
	c.security.run(ctx, &wg, errc)
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := g.Serve(c.xds.Listener(c.xdsLis)); err != nil {
			errc <- fmt.Errorf("xDS server: %w", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := admin.Serve(c.security.adminListener(c.adminLis)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("admin server: %w", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.reconcile.Run(ctx)
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
	c.log.Info("serving", "xds", c.XDSAddr(), "admin", c.AdminAddr(), "policy", c.reconcile.Policy().Filename, "xds settings", c.initial.XDS.String())
	c.security.warnUnprotected(c.log, c.adminLis.Addr())

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

// apply hands a policy to the reconcile step.
func (c *Controller) apply(ctx context.Context, p *policy.Policy) error {
	old := c.reconcile.Policy()
	if old != nil && p != old && (p.XDSAddress != old.XDSAddress || p.AdminAddress != old.AdminAddress) {
		c.log.Warn("xds/admin address changes take effect on restart", "xds", p.XDSAddress, "admin", p.AdminAddress)
	}
	if p != c.initial && !reflect.DeepEqual(p.HA, c.initial.HA) {
		c.log.Warn("ha block changes take effect on restart", "ha", p.HA.String(), "in force", c.initial.HA.String())
	}
	c.security.applyPolicy(c.log, p, c.initial)
	if err := c.reconcile.Apply(ctx, p); err != nil {
		return err
	}
	c.log.Info("configuration applied", "pools", len(p.Pools), "policy", p.Filename)
	return nil
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
		// Serving the last decisions of an unreachable leader is still
		// serving (fail static): ready, with the reason.
		fmt.Fprintln(w, "ok")
		if st := c.reconcile.HA(); !st.Leading && st.Mode != "standalone" {
			fmt.Fprintf(w, "decisions: %s, leader %q, term %d", st.Mode, st.Leader, st.Term)
			if !st.DecisionsTime.IsZero() {
				fmt.Fprintf(w, ", published %s ago", time.Since(st.DecisionsTime).Round(time.Second))
			} else {
				fmt.Fprint(w, ", none yet")
			}
			if !st.Reachable {
				fmt.Fprintf(w, "; unreachable, serving the last decisions: %s", st.Error)
			}
			fmt.Fprintln(w)
		}
	})
	mux.Handle("GET "+ha.DecisionsPath, c.board)
	mux.Handle("POST "+ha.LoadPath, c.reconcile.LoadExchange())
	mux.HandleFunc("GET /debug/ha", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(c.reconcile.HA())
	})
	mux.Handle("GET "+status.Path, status.Handler(c.Status))
	mux.Handle("GET /{$}", page.Handler(c.Status))
	mux.HandleFunc("GET /debug/fleet", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(c.Fleet())
	})
	return mux
}
