package adsload

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// RefOptions configure a RefServer.
type RefOptions struct {
	// Cluster names the Cluster and its ClusterLoadAssignment; default
	// "chat".
	Cluster string
	// Endpoints is the number of endpoints; default 100.
	Endpoints int
	// ADS turns on the snapshot cache's ADS mode (responses wait until
	// the request names every resource of the type). kvxds runs without
	// it.
	ADS bool
}

// RefServer is a bare go-control-plane xDS server: a snapshot cache
// holding one snapshot that every node gets (a constant node hash), with
// one EDS Cluster and one ClusterLoadAssignment.
type RefServer struct {
	opts  RefOptions
	cache cachev3.SnapshotCache
	xds   serverv3.Server

	mu    sync.Mutex
	round int
}

// constantHash keys every node to the same snapshot.
type constantHash struct{}

func (constantHash) ID(*core.Node) string { return "all" }

// NewRefServer returns a server holding its first snapshot.
func NewRefServer(ctx context.Context, opts RefOptions) (*RefServer, error) {
	if opts.Cluster == "" {
		opts.Cluster = "chat"
	}
	if opts.Endpoints <= 0 {
		opts.Endpoints = 100
	}
	s := &RefServer{opts: opts, cache: cachev3.NewSnapshotCache(opts.ADS, constantHash{}, nil)}
	s.xds = serverv3.NewServer(ctx, s.cache, nil)
	if _, err := s.Bump(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Register adds the ADS service to g.
func (s *RefServer) Register(g *grpc.Server) {
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
}

// Bump sets a snapshot in which every endpoint's weight changed, and
// returns the time it started setting it: SetSnapshot answers the open
// watches before it returns, so streams receive the snapshot before then.
func (s *RefServer) Bump(ctx context.Context) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.round++
	snap, err := cachev3.NewSnapshot(strconv.Itoa(s.round), map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType:  {s.cluster()},
		resourcev3.EndpointType: {s.assignment(s.round)},
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("building snapshot %d: %w", s.round, err)
	}
	if err := snap.Consistent(); err != nil {
		return time.Time{}, fmt.Errorf("snapshot %d: %w", s.round, err)
	}
	at := time.Now()
	if err := s.cache.SetSnapshot(ctx, "all", snap); err != nil {
		return time.Time{}, fmt.Errorf("setting snapshot %d: %w", s.round, err)
	}
	return at, nil
}

func (s *RefServer) cluster() *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 s.opts.Cluster,
		ConnectTimeout:       durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		LbPolicy:             clusterv3.Cluster_MAGLEV,
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			ServiceName: s.opts.Cluster,
			EdsConfig: &core.ConfigSource{
				ResourceApiVersion:    core.ApiVersion_V3,
				ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
			},
		},
	}
}

// assignment gives endpoint i the weight 1 + (i + round) % 100.
func (s *RefServer) assignment(round int) *endpointv3.ClusterLoadAssignment {
	eps := make([]*endpointv3.LbEndpoint, s.opts.Endpoints)
	for i := range eps {
		eps[i] = &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address:       fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250),
					PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8000},
				}}},
			}},
			LoadBalancingWeight: wrapperspb.UInt32(uint32(1 + (i+round)%100)),
		}
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: s.opts.Cluster,
		Endpoints:   []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}},
	}
}

// BumpPath is the admin path that calls Bump; it answers the set time in
// Unix nanoseconds as JSON {"set_unix_nano": ...}.
const BumpPath = "/bump"

// AdminHandler serves POST /bump, /metrics (Go runtime and process
// collectors) and /debug/pprof/.
func (s *RefServer) AdminHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST "+BumpPath, func(w http.ResponseWriter, r *http.Request) {
		at, err := s.Bump(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(bumpResult{SetUnixNano: at.UnixNano()})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	return mux
}

type bumpResult struct {
	SetUnixNano int64 `json:"set_unix_nano"`
}

// ServeRef runs a RefServer with xDS on xdsLis and the admin handler on
// adminLis until ctx is done. bump, if not nil, triggers a Bump per
// receive (a signal, say).
func ServeRef(ctx context.Context, opts RefOptions, xdsLis, adminLis net.Listener, bump <-chan struct{}) error {
	s, err := NewRefServer(ctx, opts)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	s.Register(g)
	admin := &http.Server{Handler: s.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- g.Serve(xdsLis) }()
	go func() { errc <- admin.Serve(adminLis) }()
	for {
		select {
		case <-bump:
			if _, err := s.Bump(ctx); err != nil {
				return err
			}
			continue
		case <-ctx.Done():
		case err = <-errc:
			err = fmt.Errorf("reference server: %w", err)
		}
		break
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	admin.Shutdown(shutdown)
	g.Stop()
	return err
}
