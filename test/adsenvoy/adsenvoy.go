// Package adsenvoy is an ADS subscriber that asks kvxds for resources as
// Envoy does and keeps the newest of each type, for the end-to-end tests
// and the benchmark's Envoy data plane.
//
// Subscribe speaks the state-of-the-world protocol, SubscribeDelta the
// delta one. Either subscribes to every listener and cluster, then to the
// route configurations the listeners' HTTP connection managers name and
// the assignments the clusters name, and ACKs every response. A response
// that fails to decode is ACKed too and reported to the caller, who
// decides what an incomplete view means.
//
// AccessLogger sends what Envoy's gRPC access logger
// (envoy.access_loggers.http_grpc) sends for the requests an Envoy routed:
// one StreamAccessLogs stream per logger, buffered and flushed as Envoy
// does.
package adsenvoy

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// Resources is the newest response of each type. A Subscriber replaces
// the slices and never changes them, so a copy stays valid.
type Resources struct {
	Listeners   []*listenerv3.Listener
	Routes      []*routev3.RouteConfiguration
	Clusters    []*clusterv3.Cluster
	Assignments []*endpointv3.ClusterLoadAssignment
	// Versions is each type's version in its last response, by type URL
	// (system_version_info on a delta stream).
	Versions map[string]string
	// Warming names the clusters (on a delta stream) that Envoy would
	// keep warming: added or replaced, with no assignment received since.
	Warming []string
}

// Subscriber is one ADS stream and what it last received.
type Subscriber struct {
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	res Resources
	err error
}

// Subscribe opens an ADS stream to addr, presenting node on every request
// (kvxds serves Envoy's resources by what the node says it is), and
// subscribes to every cluster and listener. If update is not nil, it is
// called from the receiving goroutine after each response, before its
// ACK, with the resources and the response's decoding error, and once more
// with the stream's error if the stream fails before Close.
func Subscribe(addr string, node *corev3.Node, update func(Resources, error)) (*Subscriber, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		cc.Close()
		return nil, err
	}
	send := func(r *discovery.DiscoveryRequest) error {
		r.Node = node
		return stream.Send(r)
	}
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.ListenerType} {
		if err := send(&discovery.DiscoveryRequest{TypeUrl: typ}); err != nil {
			cancel()
			cc.Close()
			return nil, err
		}
	}
	s := &Subscriber{cc: cc, cancel: cancel, done: make(chan struct{})}
	go s.recv(ctx, stream, send, update)
	return s, nil
}

// Resources is the newest resources of each type, and why they may be
// incomplete: the last response did not decode, or the stream failed.
func (s *Subscriber) Resources() (Resources, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res, s.err
}

// Close ends the stream and waits for the receiving goroutine, so update
// is not called after it returns.
func (s *Subscriber) Close() {
	s.cancel()
	s.cc.Close()
	<-s.done
}

func (s *Subscriber) recv(ctx context.Context, stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, send func(*discovery.DiscoveryRequest) error, update func(Resources, error)) {
	defer close(s.done)
	names := map[string][]string{} // subscribed names of RDS and EDS
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil { // closed
				return
			}
			s.mu.Lock()
			s.err = err
			res := s.res
			s.mu.Unlock()
			if update != nil {
				update(res, err)
			}
			return
		}
		var sub []string // names the response makes us subscribe to
		var derr error
		s.mu.Lock()
		switch resp.GetTypeUrl() {
		case resourcev3.ClusterType:
			s.res.Clusters = decode[*clusterv3.Cluster](resp, &derr)
			for _, c := range s.res.Clusters {
				sub = append(sub, cmp.Or(c.GetEdsClusterConfig().GetServiceName(), c.GetName()))
			}
		case resourcev3.ListenerType:
			s.res.Listeners = decode[*listenerv3.Listener](resp, &derr)
			for _, l := range s.res.Listeners {
				if n := HTTPConnectionManager(l).GetRds().GetRouteConfigName(); n != "" {
					sub = append(sub, n)
				}
			}
		case resourcev3.RouteType:
			s.res.Routes = decode[*routev3.RouteConfiguration](resp, &derr)
		case resourcev3.EndpointType:
			s.res.Assignments = decode[*endpointv3.ClusterLoadAssignment](resp, &derr)
		}
		s.res.Versions = maps.Clone(s.res.Versions)
		if s.res.Versions == nil {
			s.res.Versions = map[string]string{}
		}
		s.res.Versions[resp.GetTypeUrl()] = resp.GetVersionInfo()
		s.err = derr
		res := s.res
		s.mu.Unlock()
		if update != nil {
			update(res, derr)
		}
		ack := &discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(), ResourceNames: names[resp.GetTypeUrl()]}
		if err := send(ack); err != nil {
			return
		}
		next := map[string]string{resourcev3.ClusterType: resourcev3.EndpointType, resourcev3.ListenerType: resourcev3.RouteType}[resp.GetTypeUrl()]
		if next == "" {
			continue
		}
		slices.Sort(sub)
		sub = slices.Compact(sub)
		if slices.Equal(sub, names[next]) {
			continue
		}
		names[next] = sub
		if err := send(&discovery.DiscoveryRequest{TypeUrl: next, ResourceNames: sub}); err != nil {
			return
		}
	}
}

// decode unpacks a response's resources; on an error the type is left
// empty rather than half decoded.
func decode[T proto.Message](resp *discovery.DiscoveryResponse, errp *error) []T {
	var out []T
	for _, r := range resp.GetResources() {
		m, err := r.UnmarshalNew()
		if err != nil {
			*errp = err
			return nil
		}
		out = append(out, m.(T))
	}
	return out
}

// HTTPConnectionManager is the first HTTP connection manager in l's filter
// chains, where Envoy finds the route configuration to ask for, or nil.
func HTTPConnectionManager(l *listenerv3.Listener) *hcmv3.HttpConnectionManager {
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			m, err := f.GetTypedConfig().UnmarshalNew()
			if err != nil {
				continue
			}
			if hcm, ok := m.(*hcmv3.HttpConnectionManager); ok {
				return hcm
			}
		}
	}
	return nil
}
