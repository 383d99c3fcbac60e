// Command repro serves an xDS configuration over ADS, and the backends it
// names, for reproducing two grpc-js ring_hash failures (see README.md).
//
// The stall: the API listener "chat" routes requests that carry
// x-session-id to cluster "chat" (ring_hash on that header) and all others
// to cluster "chat/keyless" (round_robin). Both clusters take their
// endpoints from the one ClusterLoadAssignment "chat", so a client shares
// their subchannels. With -keyless=false there is only "chat", for every
// request.
//
// The crash (-two-rings): requests with x-tenant-id: b go to cluster
// "chat/b", all others to "chat", both ring_hash on x-session-id, over
// assignments of their own on disjoint halves of the backends. After
// -shrink-after, one new version drops the last endpoint of both
// assignments, so one EDS response changes two clusters.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"strconv"
	"time"

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
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
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
	tenantName  = "chat/b"
	sessionKey  = "x-session-id"
	tenantKey   = "x-tenant-id"
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
	twoRings := flag.Bool("two-rings", false, `instead: x-tenant-id: b to ring_hash cluster "chat/b", the rest to ring_hash "chat", on disjoint halves of the backends`)
	shrinkAfter := flag.Duration("shrink-after", 0, "with -two-rings: after this long, drop the last endpoint of both assignments in one version (0: never)")
	shrinkBoth := flag.Bool("shrink-both", true, `with -shrink-after: false drops an endpoint of "chat" only`)
	flag.Parse()
	if *twoRings && *n < 4 {
		log.Fatal("-two-rings needs at least 4 backends")
	}

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

	var snap *cachev3.Snapshot
	var err error
	if *twoRings {
		snap, err = twoRingSnapshot("1", addrs[:*n/2], addrs[*n/2:])
	} else {
		snap, err = snapshot(addrs, *keyless)
	}
	if err != nil {
		log.Fatal(err)
	}
	cache := cachev3.NewSnapshotCache(false, anyNode{}, nil)
	if err := cache.SetSnapshot(context.Background(), "", snap); err != nil {
		log.Fatal(err)
	}
	if *twoRings && *shrinkAfter > 0 {
		a, b := addrs[:*n/2], addrs[*n/2:]
		time.AfterFunc(*shrinkAfter, func() {
			nb := b
			if *shrinkBoth {
				nb = b[:len(b)-1]
			}
			snap, err := twoRingSnapshot("2", a[:len(a)-1], nb)
			if err == nil {
				err = cache.SetSnapshot(context.Background(), "", snap)
			}
			if err != nil {
				log.Fatal(err)
			}
			log.Printf("version 2: %q %v, %q %v", name, a[:len(a)-1], tenantName, nb)
		})
	}
	lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(context.Background(), cache, nil))
	log.Printf("ADS on %s, keyless cluster: %v, two rings: %v, backends: %v", lis.Addr(), *keyless && !*twoRings, *twoRings, addrs)
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

// apiListener is the API listener "chat", with route configuration "chat".
func apiListener() *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads(), RouteConfigName: name}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)}}
}

func prefix() *routev3.RouteMatch {
	return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
}

// to routes to cluster, hashing on x-session-id if hash.
func to(cluster string, hash bool) *routev3.Route_Route {
	a := &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}
	if hash {
		a.HashPolicy = []*routev3.RouteAction_HashPolicy{{
			PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: sessionKey}},
		}}
	}
	return &routev3.Route_Route{Route: a}
}

func ringHash(name, serviceName string) *clusterv3.Cluster {
	return cluster(name, serviceName, &ringhashv3.RingHash{HashFunction: ringhashv3.RingHash_XX_HASH}, "envoy.load_balancing_policies.ring_hash")
}

func snapshot(addrs []string, keyless bool) (*cachev3.Snapshot, error) {
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

	clusters := []types.Resource{ringHash(name, "")}
	if keyless {
		clusters = append(clusters, cluster(keylessName, name,
			&roundrobinv3.RoundRobin{}, "envoy.load_balancing_policies.round_robin"))
	}

	cla, err := assignment(name, addrs)
	if err != nil {
		return nil, err
	}
	// Not snap.Consistent(): it does not see routes named by API
	// listeners.
	return cachev3.NewSnapshot("1", map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: {apiListener()},
		resourcev3.RouteType:    {rc},
		resourcev3.ClusterType:  clusters,
		resourcev3.EndpointType: {cla},
	})
}

// twoRingSnapshot routes x-tenant-id: b to ring_hash "chat/b" over b, and
// everything else to ring_hash "chat" over a.
func twoRingSnapshot(version string, a, b []string) (*cachev3.Snapshot, error) {
	tenant := prefix()
	tenant.Headers = []*routev3.HeaderMatcher{{
		Name:                 tenantKey,
		HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "b"}}},
	}}
	rc := &routev3.RouteConfiguration{
		Name: name,
		VirtualHosts: []*routev3.VirtualHost{{Name: name, Domains: []string{"*"}, Routes: []*routev3.Route{
			{Match: tenant, Action: to(tenantName, true)},
			{Match: prefix(), Action: to(name, true)},
		}}},
	}
	claA, err := assignment(name, a)
	if err != nil {
		return nil, err
	}
	claB, err := assignment(tenantName, b)
	if err != nil {
		return nil, err
	}
	return cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: {apiListener()},
		resourcev3.RouteType:    {rc},
		resourcev3.ClusterType:  {ringHash(name, ""), ringHash(tenantName, "")},
		resourcev3.EndpointType: {claA, claB},
	})
}

// assignment lists addrs in one locality of weight 1.
func assignment(clusterName string, addrs []string) (*endpointv3.ClusterLoadAssignment, error) {
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
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: clusterName,
		// gRPC ignores a locality without a weight.
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{},
			LbEndpoints:         lbs,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}},
	}, nil
}
