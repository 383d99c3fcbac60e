package adsenvoy

import (
	"cmp"
	"context"
	"maps"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// SubscribeDelta is Subscribe over a delta ADS stream (Envoy's api_type
// DELTA_GRPC). It asks and withholds as Envoy's delta mux does
// (envoyproxy/envoy: NewGrpcMuxImpl, WatchMap, DeltaSubscriptionState
// under source/extensions/config_subscription/grpc/, CdsApiHelper and
// ClusterManagerImpl under source/common/upstream/):
//
//   - every cluster a response adds or changes warms until a response
//     carrying its assignment arrives (Resources.Warming);
//   - it subscribes to an assignment only when no cluster, active or
//     warming, already uses the name, and unsubscribes when none does any
//     more: a replaced cluster asks for nothing;
//   - the subscription change goes out before the Cluster response's ACK,
//     and that ACK is held while any cluster warms.
//
// It never gives up waiting (Envoy's initial_fetch_timeout), so a cluster
// the server leaves warming stays in Resources.Warming.
func SubscribeDelta(addr string, node *corev3.Node, update func(Resources, error)) (*Subscriber, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		cc.Close()
		return nil, err
	}
	send := func(r *discovery.DeltaDiscoveryRequest) error {
		r.Node = node
		return stream.Send(r)
	}
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.ListenerType} {
		if err := send(&discovery.DeltaDiscoveryRequest{TypeUrl: typ}); err != nil {
			cancel()
			cc.Close()
			return nil, err
		}
	}
	s := &Subscriber{cc: cc, cancel: cancel, done: make(chan struct{})}
	go s.recvDelta(ctx, stream, send, update)
	return s, nil
}

// deltaState is what a delta stream has received, by name, and what it
// subscribes to.
type deltaState struct {
	clusters    map[string]*clusterv3.Cluster
	listeners   map[string]*listenerv3.Listener
	routes      map[string]*routev3.RouteConfiguration
	assignments map[string]*endpointv3.ClusterLoadAssignment
	versions    map[string]string
	// subscribed: the names asked for, of RDS and EDS by type URL.
	subscribed map[string]map[string]bool
	// warming: cluster → the assignment it waits for.
	warming map[string]string
}

func (s *Subscriber) recvDelta(ctx context.Context, stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, send func(*discovery.DeltaDiscoveryRequest) error, update func(Resources, error)) {
	defer close(s.done)
	st := deltaState{
		clusters:    map[string]*clusterv3.Cluster{},
		listeners:   map[string]*listenerv3.Listener{},
		routes:      map[string]*routev3.RouteConfiguration{},
		assignments: map[string]*endpointv3.ClusterLoadAssignment{},
		versions:    map[string]string{},
		subscribed:  map[string]map[string]bool{resourcev3.RouteType: {}, resourcev3.EndpointType: {}},
		warming:     map[string]string{},
	}
	var held []*discovery.DeltaDiscoveryRequest // Cluster ACKs held while clusters warm
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
		var derr error
		var want []string // names the response makes us use, of type next
		next := ""
		switch resp.GetTypeUrl() {
		case resourcev3.ClusterType:
			old := maps.Clone(st.clusters)
			for _, n := range applyDelta(st.clusters, resp, &derr) {
				// An unchanged cluster is kept as it is.
				if c := st.clusters[n]; !proto.Equal(c, old[n]) {
					st.warming[n] = serviceName(c)
				}
			}
			for _, n := range resp.GetRemovedResources() {
				delete(st.warming, n)
			}
			for _, c := range st.clusters {
				want = append(want, serviceName(c))
			}
			next = resourcev3.EndpointType
		case resourcev3.ListenerType:
			applyDelta(st.listeners, resp, &derr)
			for _, l := range st.listeners {
				if n := HTTPConnectionManager(l).GetRds().GetRouteConfigName(); n != "" {
					want = append(want, n)
				}
			}
			next = resourcev3.RouteType
		case resourcev3.RouteType:
			applyDelta(st.routes, resp, &derr)
		case resourcev3.EndpointType:
			for _, n := range applyDelta(st.assignments, resp, &derr) {
				for c, sn := range st.warming {
					if sn == n {
						delete(st.warming, c)
					}
				}
			}
		}
		st.versions[resp.GetTypeUrl()] = resp.GetSystemVersionInfo()
		res := st.resources()
		s.mu.Lock()
		s.res, s.err = res, derr
		s.mu.Unlock()
		if update != nil {
			update(res, derr)
		}

		// The subscription change a response causes goes out before its
		// ACK: the dependent type is paused while the response is applied.
		if next != "" {
			if req := st.resubscribe(next, want); req != nil {
				if err := send(req); err != nil {
					return
				}
			}
		}
		ack := &discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
		if resp.GetTypeUrl() == resourcev3.ClusterType && len(st.warming) > 0 {
			held = append(held, ack)
			continue
		}
		// The last cluster to warm resumes the Cluster ACKs while its
		// assignment is applied, before that response's own ACK.
		if len(st.warming) == 0 {
			for _, h := range held {
				if err := send(h); err != nil {
					return
				}
			}
			held = nil
		}
		if err := send(ack); err != nil {
			return
		}
	}
}

// resubscribe brings the subscription of typ to want, and returns the
// request that says so, or nil when it does not change.
func (st *deltaState) resubscribe(typ string, want []string) *discovery.DeltaDiscoveryRequest {
	sub := st.subscribed[typ]
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: typ}
	keep := map[string]bool{}
	for _, n := range want {
		keep[n] = true
		if !sub[n] {
			sub[n] = true
			req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
		}
	}
	for n := range sub {
		if !keep[n] {
			delete(sub, n)
			req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
		}
	}
	if len(req.ResourceNamesSubscribe) == 0 && len(req.ResourceNamesUnsubscribe) == 0 {
		return nil
	}
	slices.Sort(req.ResourceNamesSubscribe)
	req.ResourceNamesSubscribe = slices.Compact(req.ResourceNamesSubscribe)
	slices.Sort(req.ResourceNamesUnsubscribe)
	return req
}

// resources is st as Resources, each type sorted by name, all new slices.
func (st *deltaState) resources() Resources {
	return Resources{
		Listeners:   sortedValues(st.listeners),
		Routes:      sortedValues(st.routes),
		Clusters:    sortedValues(st.clusters),
		Assignments: sortedValues(st.assignments),
		Versions:    maps.Clone(st.versions),
		Warming:     slices.Sorted(maps.Keys(st.warming)),
	}
}

func sortedValues[T any](m map[string]T) []T {
	out := make([]T, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}

// serviceName is the assignment cluster c uses.
func serviceName(c *clusterv3.Cluster) string {
	return cmp.Or(c.GetEdsClusterConfig().GetServiceName(), c.GetName())
}

// applyDelta adds or replaces the resources of resp in m, drops the
// removed ones and returns the names it added or replaced; a resource that
// fails to decode is left as it was.
func applyDelta[T proto.Message](m map[string]T, resp *discovery.DeltaDiscoveryResponse, errp *error) []string {
	var names []string
	for _, r := range resp.GetResources() {
		v, err := r.GetResource().UnmarshalNew()
		if err != nil {
			*errp = err
			continue
		}
		t, ok := v.(T)
		if !ok {
			continue
		}
		m[r.GetName()] = t
		names = append(names, r.GetName())
	}
	for _, n := range resp.GetRemovedResources() {
		delete(m, n)
	}
	return names
}
