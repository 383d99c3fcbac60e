// Command repro serves a static xDS configuration over ADS, and the
// backends it names, for reproducing a grpc-js ring_hash stall (see
// README.md).
//
// The API listener "chat" routes requests that carry x-session-id to
// cluster "chat" (ring_hash on that header) and all others to cluster
// "chat/keyless" (round_robin). Both clusters take their endpoints from the
// one ClusterLoadAssignment "chat", so a client shares their subchannels.
// With -keyless=false there is only "chat", for every request.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	name        = "chat"
	keylessName = "chat/keyless"
	sessionKey  = "x-session-id"
)

// backend answers every UnaryCall with its id.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

func (b *backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{ServerId: b.id}, nil
}

// anyNode serves the one snapshot to every node id.
type anyNode struct{}

func (anyNode) ID(*corev3.Node) string { return "" }

func main() {
	port := flag.Int("port", 18000, "ADS port on 127.0.0.1")
	n := flag.Int("backends", 3, "number of backends")
	keyless := flag.Bool("keyless", true, `route requests without x-session-id to a round_robin cluster "chat/keyless" over the same endpoints`)
	flag.Parse()

	var addrs []string
	for i := range *n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		g := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(g, &backend{id: fmt.Sprintf("replica-%d", i)})
		go g.Serve(lis)
		addrs = append(addrs, lis.Addr().String())
	}

	snap, err := snapshot(addrs, *keyless)
	if err != nil {
		log.Fatal(err)
	}
	cache := cachev3.NewSnapshotCache(false, anyNode{}, nil)
	if err := cache.SetSnapshot(context.Background(), "", snap); err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(context.Background(), cache, nil))
	log.Printf("ADS on %s, keyless cluster: %v, backends: %v", lis.Addr(), *keyless, addrs)
	log.Fatal(g.Serve(lis))
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		log.Fatal(err)
	}
	return a
}

func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

func cluster(name, serviceName string, policy proto.Message, policyName string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads(), ServiceName: serviceName},
		LoadBalancingPolicy: &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{{
			TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: policyName, TypedConfig: mustAny(policy)},
		}}},
	}
}

func snapshot(addrs []string, keyless bool) (*cachev3.Snapshot, error) {
	hcm := &hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads(), RouteConfigName: name}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	listener := &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)}}

	prefix := func() *routev3.RouteMatch {
		return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	}
	to := func(cluster string, hash bool) *routev3.Route_Route {
		a := &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}
		if hash {
			a.HashPolicy = []*routev3.RouteAction_HashPolicy{{
				PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: sessionKey}},
			}}
		}
		return &routev3.Route_Route{Route: a}
	}
	var routes []*routev3.Route
	if keyless {
		keyed := prefix()
		keyed.Headers = []*routev3.HeaderMatcher{{
			Name:                 sessionKey,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true},
		}}
		routes = []*routev3.Route{
			{Match: keyed, Action: to(name, true)},
			{Match: prefix(), Action: to(keylessName, false)},
		}
	} else {
		routes = []*routev3.Route{{Match: prefix(), Action: to(name, true)}}
	}
	rc := &routev3.RouteConfiguration{
		Name:         name,
		VirtualHosts: []*routev3.VirtualHost{{Name: name, Domains: []string{"*"}, Routes: routes}},
	}

	clusters := []types.Resource{cluster(name, "",
		&ringhashv3.RingHash{HashFunction: ringhashv3.RingHash_XX_HASH}, "envoy.load_balancing_policies.ring_hash")}
	if keyless {
		clusters = append(clusters, cluster(keylessName, name,
			&roundrobinv3.RoundRobin{}, "envoy.load_balancing_policies.round_robin"))
	}

	var lbs []*endpointv3.LbEndpoint
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, err
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, err
		}
		lbs = append(lbs, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address:       host,
				PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
			}}},
		}}})
	}
	cla := &endpointv3.ClusterLoadAssignment{
		ClusterName: name,
		// gRPC ignores a locality without a weight.
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{},
			LbEndpoints:         lbs,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}},
	}

	// Not snap.Consistent(): it does not see routes named by API
	// listeners.
	return cachev3.NewSnapshot("1", map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: {listener},
		resourcev3.RouteType:    {rc},
		resourcev3.ClusterType:  clusters,
		resourcev3.EndpointType: {cla},
	})
}
