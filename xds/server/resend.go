package server

import (
	"cmp"
	"context"
	"slices"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/kvxds/kvxds/xds/translate"
)

// On a delta stream, Envoy does not ask for the assignment of a Cluster it
// replaces, so kvxds sends it unasked, right after the Cluster.
//
// What Envoy does, from its source (envoyproxy/envoy, main, Dec 2026):
//   - A changed Cluster becomes a new cluster that warms beside the active
//     one (ClusterManagerImpl::addOrUpdateCluster,
//     source/common/upstream/cluster_manager_impl.cc); its EDS subscription
//     starts on its service name (EdsClusterImpl::startPreInit,
//     source/extensions/clusters/eds/eds.cc).
//   - The delta mux subscribes only to names no other watch holds
//     (WatchMap::findAdditions in
//     source/extensions/config_subscription/grpc/watch_map.cc), and sends a
//     request only when its subscription changed
//     (DeltaSubscriptionState::subscriptionUpdatePending in
//     delta_subscription_state.cc; NewGrpcMuxImpl::updateWatch in
//     new_grpc_mux_impl.cc). The active cluster still holds the name, so no
//     request goes out: unlike a state-of-the-world stream, where every new
//     watch re-sends the type's request (GrpcMuxImpl::addWatch).
//   - The Cluster's ACK waits too: CDS stays paused while any cluster warms
//     (ClusterManagerImpl::updateClusterCounts), and EDS is paused while the
//     Cluster response is applied (CdsApiHelper::onConfigUpdate,
//     source/common/upstream/cds_api_helper.cc).
//   - The new cluster warms until a response carrying its assignment
//     arrives (every watch of a name receives it:
//     WatchMap::onConfigUpdate), or until initial_fetch_timeout, after which
//     Envoy 1.32 and later take the assignment it cached
//     (EdsClusterImpl::onConfigUpdateFailed).
//
// go-control-plane's delta server answers only requests and snapshot
// changes, and its cache sends a push's types in no fixed order. So after
// each Cluster response to an Envoy, deltaStream sends the assignments of
// the clusters it carried that the client already holds, from the snapshot
// being served, as a response of its own. A cluster whose assignment the
// client does not hold yet (a new service name) is subscribed to by Envoy
// and answered by the cache. When the push also changed the assignment, the
// cache's own response may follow with the same content; Envoy applies it
// without a rebuild. Separate (not aggregated) delta CDS and EDS streams
// are left as they are: one cannot order its responses after the other's.

// ads serves the aggregated service: state of the world as it is, delta
// streams through deltaStream.
type ads struct {
	inner discovery.AggregatedDiscoveryServiceServer
	s     *Server
}

func (a ads) StreamAggregatedResources(stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return a.inner.StreamAggregatedResources(stream)
}

func (a ads) DeltaAggregatedResources(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	d := &deltaStream{AggregatedDiscoveryService_DeltaAggregatedResourcesServer: stream, s: a.s, id: new(int64)}
	d.ctx = context.WithValue(stream.Context(), deltaStreamKey{}, d.id)
	return a.inner.DeltaAggregatedResources(d)
}

// deltaStreamKey carries the stream id the callbacks learn
// (OnDeltaStreamOpen) to the deltaStream that sends on it.
type deltaStreamKey struct{}

type deltaStream struct {
	discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	s   *Server
	ctx context.Context
	// id is the stream's id, set by OnDeltaStreamOpen before anything is
	// sent, on the goroutine that sends.
	id *int64
}

func (d *deltaStream) Context() context.Context { return d.ctx }

func (d *deltaStream) Send(r *discovery.DeltaDiscoveryResponse) error {
	if err := d.AggregatedDiscoveryService_DeltaAggregatedResourcesServer.Send(r); err != nil {
		return err
	}
	if r.GetTypeUrl() != resourcev3.ClusterType || len(r.GetResources()) == 0 {
		return nil
	}
	again := d.s.assignmentsAfter(*d.id, r)
	if again == nil {
		return nil
	}
	return d.AggregatedDiscoveryService_DeltaAggregatedResourcesServer.Send(again)
}

// assignmentsAfter is the response that follows Cluster response r on
// delta stream id: the assignments the client holds of the clusters r
// carries, or nil when there are none or the client is not an Envoy.
func (s *Server) assignmentsAfter(id int64, r *discovery.DeltaDiscoveryResponse) *discovery.DeltaDiscoveryResponse {
	t := s.streams
	t.mu.Lock()
	st := t.streams[id]
	if st == nil || st.edsHeld == nil || Classify(st.node) != translate.Envoy {
		t.mu.Unlock()
		return nil
	}
	kind := Classify(st.node)
	t.mu.Unlock()

	snap, err := s.cache.GetSnapshot(kind.String())
	if err != nil {
		return nil
	}
	clusters := snap.GetResources(resourcev3.ClusterType)
	var names []string
	for _, res := range r.GetResources() {
		c, ok := clusters[res.GetName()].(*clusterv3.Cluster)
		if !ok {
			continue
		}
		names = append(names, cmp.Or(c.GetEdsClusterConfig().GetServiceName(), c.GetName()))
	}
	slices.Sort(names)
	names = slices.Compact(names)

	t.mu.Lock()
	names = slices.DeleteFunc(names, func(n string) bool { return !st.edsHeld[n] })
	t.mu.Unlock()
	if len(names) == 0 {
		return nil
	}

	assignments := snap.GetResources(resourcev3.EndpointType)
	out := &discovery.DeltaDiscoveryResponse{
		TypeUrl:           resourcev3.EndpointType,
		SystemVersionInfo: snap.GetVersion(resourcev3.EndpointType),
	}
	for _, n := range names {
		cla, ok := assignments[n]
		if !ok {
			continue
		}
		b, err := cachev3.MarshalResource(cla)
		if err != nil {
			s.log.Error("marshalling an assignment to send again", "name", n, "error", err)
			continue
		}
		out.Resources = append(out.Resources, &discovery.Resource{
			Name:     n,
			Version:  cachev3.HashResource(b),
			Resource: &anypb.Any{TypeUrl: resourcev3.EndpointType, Value: b},
		})
	}
	if len(out.Resources) == 0 {
		return nil
	}
	// go-control-plane numbers its nonces 1, 2, ...; these stay apart.
	t.mu.Lock()
	st.resends++
	out.Nonce = "resend-" + strconv.Itoa(st.resends)
	t.mu.Unlock()
	t.OnStreamDeltaResponse(id, nil, out)
	return out
}
