// Package server serves kvxds's translated fleet to Envoy and proxyless
// gRPC clients over xDS: ADS (state of the world and delta) plus the
// separate CDS, EDS, LDS and RDS services.
//
// Clients are grouped by kind, not by node id: every Envoy receives the
// same snapshot and every proxyless gRPC client receives the other one, so
// any node id is served and every client of a kind builds the same hash
// table. See Classify for how a node's kind is recognised.
//
// The server fails static: Update takes a model that fleet.Prepare
// has already validated, builds every snapshot before anything is swapped
// in, and a model that fails keeps the last good snapshots serving.
package server

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/translate"
)

// Options configure a Server.
type Options struct {
	Logger hclog.Logger
	// Registerer receives the server's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock of DataPlanes' times; nil means time.Now.
	Now func() time.Time
	// SendTimeout is how long one response may stay unsent to a client
	// that stopped reading before its connection is dropped (see
	// Listener); 0 means DefaultSendTimeout.
	SendTimeout time.Duration
}

// Server holds the current snapshots and the xDS gRPC services.
type Server struct {
	log     hclog.Logger
	cache   cachev3.SnapshotCache
	xds     serverv3.Server
	metrics *metrics
	streams *streamTracker
	guard   *guard

	mu      sync.Mutex
	last    *fleet.Model // last model that was pushed
	current map[translate.Kind]*translate.Resources
	ready   bool
}

// New returns a Server with no snapshot yet: clients that connect before
// the first Update wait for one.
func New(opts Options) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	m := newMetrics(opts.Registerer)
	s := &Server{
		log:     logger,
		metrics: m,
		current: map[translate.Kind]*translate.Resources{},
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s.streams = newStreamTracker(logger.Named("stream"), m, now)
	slow := m.dropped.WithLabelValues("slow_reader")
	s.guard = newGuard(opts.SendTimeout, func() {
		slow.Inc()
		logger.Warn("dropping a client connection: a response stayed unsent past the send timeout", "timeout", opts.SendTimeout)
	})
	// ads=false: go-control-plane's ADS mode withholds a response until the
	// requested names cover every resource of the type, so a gRPC client
	// that asks for one pool's listener would never get it. Without it the
	// cache answers with exactly the requested resources.
	s.cache = cachev3.NewSnapshotCache(false, nodeKindHash{}, cacheLogger{logger.Named("cache")})
	s.xds = serverv3.NewServer(context.Background(), s.cache, s.streams)
	return s
}

// Register adds the ADS, CDS, EDS, LDS and RDS services to g.
func (s *Server) Register(g *grpc.Server) {
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, ads{inner: s.xds, s: s})
	clusterservice.RegisterClusterDiscoveryServiceServer(g, s.xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, s.xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, s.xds)
	routeservice.RegisterRouteDiscoveryServiceServer(g, s.xds)
}

// Ready reports whether a snapshot has been set.
func (s *Server) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// Versions returns the per-type versions currently served to a kind,
// keyed by type URL.
func (s *Server) Versions(kind translate.Kind) map[string]string {
	snap, err := s.cache.GetSnapshot(kind.String())
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, t := range []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType} {
		out[t] = snap.GetVersion(t)
	}
	return out
}

// Resources returns the resources currently served to kind, nil before
// the first Update. Callers must not modify them.
func (s *Server) Resources(kind translate.Kind) *translate.Resources {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current[kind]
}

// Update translates m and, if it differs from what is being served, swaps
// the new snapshots in. On error nothing changes.
func (s *Server) Update(ctx context.Context, m fleet.Model) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != nil && s.last.Equal(m) {
		return nil
	}
	f := m.Fleet()
	next := map[translate.Kind]*translate.Resources{}
	var moved map[string]bool
	if s.last != nil {
		moved = loadMoved(s.last.Fleet(), f)
	}
	switch {
	case moved != nil:
		// A load push: only Envoy's routes carry the replicas' load (its
		// pick and prefill tables); everything else is served as it is.
		var err error
		if next, err = translate.RetranslateLoad(s.current, m, moved); err != nil {
			s.metrics.updateErrors.Inc()
			return fmt.Errorf("translating load changes: %w", err)
		}
	case s.last != nil && sameShape(s.last.Fleet(), f):
		// Membership, weight and health changes touch only EDS (and the
		// clusters whose ring size follows the healthy weight: gRPC
		// clients', and Envoy's with entries_per_weight): listeners and
		// routes are reused as they are, so their versions cannot move.
		var err error
		if next, err = translate.RetranslateAll(s.current, m); err != nil {
			s.metrics.updateErrors.Inc()
			return fmt.Errorf("translating endpoint changes: %w", err)
		}
	default:
		for _, kind := range translate.Kinds {
			r, err := translate.Translate(m, kind)
			if err != nil {
				s.metrics.updateErrors.Inc()
				return fmt.Errorf("translating for %s: %w", kind, err)
			}
			next[kind] = r
		}
	}
	snaps := map[translate.Kind]*cachev3.Snapshot{}
	for kind, r := range next {
		snap, err := r.Snapshot()
		if err != nil {
			s.metrics.updateErrors.Inc()
			return fmt.Errorf("building %s snapshot: %w", kind, err)
		}
		snaps[kind] = snap
	}
	for _, kind := range slices.Sorted(maps.Keys(snaps)) {
		snap := snaps[kind]
		key := kind.String()
		prev, _ := s.cache.GetSnapshot(key)
		if err := s.cache.SetSnapshot(ctx, key, snap); err != nil {
			return fmt.Errorf("setting %s snapshot: %w", key, err)
		}
		for _, t := range []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType} {
			if prev == nil || prev.GetVersion(t) != snap.GetVersion(t) {
				s.metrics.pushes.WithLabelValues(key, shortType(t)).Inc()
				s.log.Debug("new version", "clients", key, "type", shortType(t), "version", snap.GetVersion(t))
			}
		}
	}
	s.current = next
	s.last = &m
	s.ready = true
	s.metrics.pools.Set(float64(len(f.Pools)))
	n := 0
	for _, p := range f.Pools {
		n += len(p.Endpoints)
	}
	s.metrics.endpoints.Set(float64(n))
	return nil
}

// loadMoved returns, when a and b differ at most in what their slot
// tables carry of the replicas' load (translate.RetranslateLoad): the
// bytes and adapters in flight, when they were counted, the prefix-cache
// hit rates, and the prefill tables built from them, the pools whose
// figures differ; nil otherwise.
func loadMoved(a, b fleet.Fleet) map[string]bool {
	if len(a.Pools) != len(b.Pools) {
		return nil
	}
	moved := map[string]bool{}
	for i := range a.Pools {
		pa, pb := a.Pools[i], b.Pools[i]
		if reflect.DeepEqual(pa, pb) {
			continue
		}
		if !reflect.DeepEqual(withoutLoad(pa), withoutLoad(pb)) {
			return nil
		}
		moved[pb.Name] = true
	}
	return moved
}

// withoutLoad is p without its load figures (loadMoved).
func withoutLoad(p fleet.Pool) fleet.Pool {
	p.LoadAt, p.PrefillTable, p.Went, p.Seen = time.Time{}, nil, nil, ""
	p.Endpoints = slices.Clone(p.Endpoints)
	for i := range p.Endpoints {
		e := &p.Endpoints[i]
		e.InFlightBytes, e.InFlightAdapters, e.Cached = 0, "", 0
	}
	return p
}

// sameShape reports whether a and b differ at most in their endpoints,
// and not in what of them the routes carry (pick tables).
func sameShape(a, b fleet.Fleet) bool {
	if len(a.Pools) != len(b.Pools) {
		return false
	}
	for i := range a.Pools {
		pa, pb := a.Pools[i], b.Pools[i]
		// Pick tables ride in the routes, and follow the replicas: their
		// membership, health, weights, bytes in flight and hit rates, and
		// the adapters' entries, which follow the endpoints through the
		// placement too (a member drained and replaced). In a picking
		// pool any endpoint change rebuilds the routes, which almost
		// every such change moves anyway, rather than building both
		// tables here to compare (BenchmarkPush/load: two of a load
		// push's three table builds).
		if translate.Picks(&pa, translate.Envoy) && !slices.Equal(pa.Endpoints, pb.Endpoints) {
			return false
		}
		pa.Endpoints, pb.Endpoints = nil, nil
		if !reflect.DeepEqual(pa, pb) {
			return false
		}
	}
	return true
}

func shortType(t string) string {
	switch t {
	case resourcev3.ListenerType:
		return "lds"
	case resourcev3.RouteType:
		return "rds"
	case resourcev3.ClusterType:
		return "cds"
	case resourcev3.EndpointType:
		return "eds"
	}
	return t
}

// cacheLogger adapts hclog to go-control-plane's logger. The cache is
// chatty at info level, so everything but errors goes to debug.
type cacheLogger struct{ l hclog.Logger }

func (c cacheLogger) Debugf(f string, a ...any) { c.l.Trace(fmt.Sprintf(f, a...)) }
func (c cacheLogger) Infof(f string, a ...any)  { c.l.Debug(fmt.Sprintf(f, a...)) }
func (c cacheLogger) Warnf(f string, a ...any)  { c.l.Debug(fmt.Sprintf(f, a...)) }
func (c cacheLogger) Errorf(f string, a ...any) { c.l.Error(fmt.Sprintf(f, a...)) }
