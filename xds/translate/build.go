package translate

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	lbcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/common/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	maglevv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kvxds/kvxds/xds/fleet"
)

// Names of the typed extensions of the load-balancing policies.
const (
	maglevPolicyName       = "envoy.load_balancing_policies.maglev"
	ringHashPolicyName     = "envoy.load_balancing_policies.ring_hash"
	roundRobinPolicyName   = "envoy.load_balancing_policies.round_robin"
	leastRequestPolicyName = "envoy.load_balancing_policies.least_request"
)

// connectTimeout bounds TCP connection set-up to a replica (Envoy only;
// gRPC ignores it).
const connectTimeout = 5 * time.Second

// validator is what protoc-gen-validate generates on every message.
type validator interface {
	proto.Message
	ValidateAll() error
}

// typed validates m (ValidateAll does not descend into Any) and packs it
// deterministically.
func typed(m validator) (*anypb.Any, error) {
	if err := m.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	a := new(anypb.Any)
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, err
	}
	return a, nil
}

// adsSource is "fetch it on the same ADS stream, xDS v3", the only config
// source proxyless gRPC accepts besides self.
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

// httpConnectionManager is the HCM shared by both kinds: routes over
// ADS and the router filter.
//
// request_timeout (whole downstream request) and max_stream_duration are
// left unset, i.e. disabled: long prompts and long streamed generations
// are legitimate, and the route timeout is the one knob for them.
// stream_idle_timeout keeps Envoy's default (5m) until the route is
// chosen; the route's idle_timeout overrides it when the pool sets one.
//
// For Envoy, a hash pool with body keys gets the Lua filter that sets
// their headers first (see bodyKeyFilter).
func httpConnectionManager(p *fleet.Pool, kind Kind) (*hcmv3.HttpConnectionManager, error) {
	router, err := typed(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	var filters []*hcmv3.HttpFilter
	if bodyKeys(p, kind) {
		f, err := bodyKeyFilter(p)
		if err != nil {
			return nil, fmt.Errorf("body keys: %w", err)
		}
		filters = append(filters, f)
	}
	filters = append(filters, &hcmv3.HttpFilter{
		Name:       wellknown.Router,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
	})
	return &hcmv3.HttpConnectionManager{
		StatPrefix: p.Name,
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: p.Name,
		}},
		HttpFilters: filters,
	}, nil
}

func buildListener(p *fleet.Pool, kind Kind) (*listenerv3.Listener, error) {
	hcm, err := httpConnectionManager(p, kind)
	if err != nil {
		return nil, err
	}
	cfg, err := typed(hcm)
	if err != nil {
		return nil, err
	}
	var l *listenerv3.Listener
	switch kind {
	case Envoy:
		l = &listenerv3.Listener{
			Name: p.Name,
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Protocol:      corev3.SocketAddress_TCP,
				Address:       p.ListenAddress,
				PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: p.Port},
			}}},
			FilterChains: []*listenerv3.FilterChain{{
				Filters: []*listenerv3.Filter{{
					Name:       wellknown.HTTPConnectionManager,
					ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg},
				}},
			}},
		}
		if bodyKeys(p, kind) {
			l.PerConnectionBufferLimitBytes = wrapperspb.UInt32(bodyBufferLimit(p))
		}
	case GRPC, GRPCJS:
		// A client-side API listener: no address, named after the
		// target the client dials (xds:///P).
		l = &listenerv3.Listener{
			Name:        p.Name,
			ApiListener: &listenerv3.ApiListener{ApiListener: cfg},
		}
	default:
		return nil, fmt.Errorf("unknown kind %v", kind)
	}
	if err := l.ValidateAll(); err != nil {
		return nil, err
	}
	return l, nil
}

func buildRoute(p *fleet.Pool, kind Kind) (*routev3.RouteConfiguration, error) {
	// Every key is terminal: the first one present in the request decides
	// the hash, later ones are only fallbacks (Envoy and gRPC both stop at
	// the first terminal policy that produced a hash). gRPC ignores
	// cookie and query-parameter policies.
	keys := routeKeys(p, kind)
	hp := hashPolicies(keys)
	action := func(cluster string, hp []*routev3.RouteAction_HashPolicy) *routev3.Route_Route {
		return routeAction(p, cluster, hp)
	}
	// Group routes come first: their header matches decide before the
	// pool's own routes (groups.go).
	routes := groupRoutes(p, kind, keys)
	keyless := keylessCluster(p, kind)
	if keyless == "" {
		routes = append(routes, &routev3.Route{Match: prefixMatch(), Action: action(p.Name, hp)})
	} else {
		// One route per key source, in chain order, sends requests that
		// carry a key to the hash table; the last route sends the rest to
		// the keyless cluster. gRPC skips routes that match on query
		// parameters (it has none), and never sees a cookie unless the
		// application sends one as metadata.
		for _, k := range keys {
			m := prefixMatch()
			switch {
			case k.Header != "":
				m.Headers = []*routev3.HeaderMatcher{{
					Name:                 strings.ToLower(k.Header),
					HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true},
				}}
			case k.Cookie != "":
				// Full match over the Cookie header, whose pairs are
				// separated by "; " (or ", " where a header matcher sees
				// repeated headers joined).
				m.Headers = []*routev3.HeaderMatcher{{
					Name: "cookie",
					HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
						MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{
							Regex: `(.*[;,]\s*)?` + regexp.QuoteMeta(k.Cookie) + `=.*`,
						}},
					}},
				}}
			case k.QueryParameter != "":
				m.QueryParameters = []*routev3.QueryParameterMatcher{{
					Name:                         k.QueryParameter,
					QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true},
				}}
			}
			routes = append(routes, &routev3.Route{Match: m, Action: action(p.Name, hp)})
		}
		routes = append(routes, &routev3.Route{Match: prefixMatch(), Action: action(keyless, nil)})
	}
	rc := &routev3.RouteConfiguration{
		Name: p.Name,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    p.Name,
			Domains: []string{"*"},
			Routes:  routes,
		}},
	}
	if err := rc.ValidateAll(); err != nil {
		return nil, err
	}
	return rc, nil
}

// hashPolicies are the route hash policies of keys, each terminal. Body
// keys have none: routes see them as their generated headers (routeKeys),
// and an Envoy configured elsewhere cannot compute them.
func hashPolicies(keys []fleet.HashKey) []*routev3.RouteAction_HashPolicy {
	hp := make([]*routev3.RouteAction_HashPolicy, 0, len(keys))
	for _, k := range keys {
		h := &routev3.RouteAction_HashPolicy{Terminal: true}
		switch {
		case k.Header != "":
			h.PolicySpecifier = &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: k.Header}}
		case k.Cookie != "":
			// No ttl: Envoy then only reads the cookie, never sets one.
			h.PolicySpecifier = &routev3.RouteAction_HashPolicy_Cookie_{Cookie: &routev3.RouteAction_HashPolicy_Cookie{Name: k.Cookie}}
		case k.QueryParameter != "":
			h.PolicySpecifier = &routev3.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &routev3.RouteAction_HashPolicy_QueryParameter{Name: k.QueryParameter}}
		default:
			continue
		}
		hp = append(hp, h)
	}
	return hp
}

// routeAction sends a route of p to cluster, hashing with hp.
func routeAction(p *fleet.Pool, cluster string, hp []*routev3.RouteAction_HashPolicy) *routev3.Route_Route {
	a := &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
		HashPolicy:       hp,
		// Always explicit: an unset timeout is Envoy's 15s default,
		// which would cut streamed generations; 0s disables it.
		Timeout: durationpb.New(p.RouteTimeout),
	}
	if p.IdleTimeout > 0 {
		a.IdleTimeout = durationpb.New(p.IdleTimeout)
	}
	return &routev3.Route_Route{Route: a}
}

func prefixMatch() *routev3.RouteMatch {
	return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
}

// keylessCluster is the name of p's keyless cluster for kind, or "" if
// it has none.
//
// grpc-js gets none: it shares subchannels between the clusters of a
// channel, and once the keyless cluster's balancer has connected an
// endpoint, grpc-js's ring hash stalls on it (its picker starts the
// endpoint's connection from inside a pick, is told synchronously that it
// is ready, and queues the pick after the only update it will get). Its
// keyless requests take a random hash on the ring instead.
func keylessCluster(p *fleet.Pool, kind Kind) string {
	if p.Balancer != fleet.ConsistentHash || p.Hash.Keyless == fleet.Random || kind == GRPCJS {
		return ""
	}
	return p.Name + fleet.KeylessSuffix
}

// buildClusters returns p's cluster and, if it has one, its keyless
// cluster: the same endpoints (the same ClusterLoadAssignment, so weights
// and health stay one EDS resource) under round robin or least request.
// Proxyless gRPC clients get a hash cluster of their own whose ring size
// follows the pool's healthy weight (see fleet.GRPCRingSize).
func buildClusters(p *fleet.Pool, pl *fleet.Plan, kind Kind) ([]*clusterv3.Cluster, error) {
	groups, err := groupClusters(p, pl, kind)
	if err != nil {
		return nil, err
	}
	p = poolView(p, pl, kind)
	var c *clusterv3.Cluster
	if kind.proxyless() && p.Balancer == fleet.ConsistentHash {
		c, err = grpcHashCluster(p, pl.PerWeight)
	} else {
		c, err = buildCluster(p, p.Name, "")
	}
	if err != nil {
		return nil, err
	}
	name := keylessCluster(p, kind)
	if name == "" {
		return append([]*clusterv3.Cluster{c}, groups...), nil
	}
	kp := *p
	kp.Balancer = p.Hash.Keyless
	k, err := buildCluster(&kp, name, p.Name)
	if err != nil {
		return nil, fmt.Errorf("keyless: %w", err)
	}
	return append([]*clusterv3.Cluster{c, k}, groups...), nil
}

// buildCluster builds the cluster called name that balances as p says over
// the endpoints of ClusterLoadAssignment serviceName ("": name itself).
//
// It uses load_balancing_policy, not the legacy lb_policy enum (gRPC NACKs
// lb_policy MAGLEV). Each client takes the first policy of the list it
// supports: Envoy takes Maglev, gRPC (which has no Maglev) takes RingHash
// on the same keys and the same endpoint hash keys.
func buildCluster(p *fleet.Pool, name, serviceName string) (*clusterv3.Cluster, error) {
	policies, err := lbPolicies(p)
	if err != nil {
		return nil, err
	}
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: serviceName},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LoadBalancingPolicy:  &clusterv3.LoadBalancingPolicy{Policies: policies},
	}
	if err := c.ValidateAll(); err != nil {
		return nil, err
	}
	return c, nil
}

// lbPolicies is a pool's load_balancing_policy list; each client takes the
// first policy it supports.
func lbPolicies(p *fleet.Pool) ([]*clusterv3.LoadBalancingPolicy_Policy, error) {
	single := func(name string, m validator) ([]*clusterv3.LoadBalancingPolicy_Policy, error) {
		a, err := typed(m)
		if err != nil {
			return nil, err
		}
		return []*clusterv3.LoadBalancingPolicy_Policy{{
			TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: name, TypedConfig: a},
		}}, nil
	}
	switch p.Balancer {
	case fleet.RoundRobin:
		return single(roundRobinPolicyName, &roundrobinv3.RoundRobin{})
	case fleet.LeastRequest:
		// Round robin follows for the clients without least request
		// (grpc-js NACKs a list it knows nothing of).
		lr, err := single(leastRequestPolicyName, &leastrequestv3.LeastRequest{})
		if err != nil {
			return nil, err
		}
		rr, err := single(roundRobinPolicyName, &roundrobinv3.RoundRobin{})
		if err != nil {
			return nil, err
		}
		return append(lr, rr...), nil
	}
	var chc *lbcommonv3.ConsistentHashingLbConfig
	if p.Hash.BalanceFactor != 0 {
		chc = &lbcommonv3.ConsistentHashingLbConfig{HashBalanceFactor: wrapperspb.UInt32(p.Hash.BalanceFactor)}
	}
	var policies []*clusterv3.LoadBalancingPolicy_Policy
	if p.Hash.Algorithm == fleet.Maglev {
		mg, err := typed(&maglevv3.Maglev{
			TableSize:                 wrapperspb.UInt64(p.Hash.TableSize),
			ConsistentHashingLbConfig: chc,
		})
		if err != nil {
			return nil, err
		}
		policies = append(policies, &clusterv3.LoadBalancingPolicy_Policy{
			TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: maglevPolicyName, TypedConfig: mg},
		})
	}
	// XX_HASH: gRPC NACKs anything else (DEFAULT_HASH included). Ring
	// sizes only when the pool sets them: some gRPC implementations reject
	// an explicit minimum.
	rh := &ringhashv3.RingHash{
		HashFunction:              ringhashv3.RingHash_XX_HASH,
		ConsistentHashingLbConfig: chc,
	}
	if p.Hash.MinRingSize != 0 {
		rh.MinimumRingSize = wrapperspb.UInt64(p.Hash.MinRingSize)
	}
	if p.Hash.MaxRingSize != 0 {
		rh.MaximumRingSize = wrapperspb.UInt64(p.Hash.MaxRingSize)
	}
	rha, err := typed(rh)
	if err != nil {
		return nil, err
	}
	policies = append(policies, &clusterv3.LoadBalancingPolicy_Policy{
		TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: ringHashPolicyName, TypedConfig: rha},
	})
	return policies, nil
}

var healthStatus = [...]corev3.HealthStatus{
	fleet.Healthy:   corev3.HealthStatus_HEALTHY,
	fleet.Draining:  corev3.HealthStatus_DRAINING,
	fleet.Degraded:  corev3.HealthStatus_DEGRADED,
	fleet.Unhealthy: corev3.HealthStatus_UNHEALTHY,
}

// buildEndpoints groups p's endpoints by locality (gRPC requires every
// endpoint to be in a locality, and each locality once per priority).
// Localities are sorted; inside one, endpoints keep the normalised (hash
// key) order.
//
// Each endpoint carries its identity as envoy.lb hash_key metadata: Envoy's
// Maglev and ring hash and gRPC's ring hash (gRFC A76) then place it on the
// ring by identity, not by address, so every client builds the same table
// and a replica that moves keeps its keys.
//
// A locality's weight is the sum of its endpoints' weights. Envoy's
// consistent hashing ignores locality weights (locality_weighted_lb_config
// is not set), so each endpoint's share is weight/total. gRPC-Go (gRFC
// A113) gives each endpoint (weight/locality sum) × (locality weight /
// locality total), which with this choice is weight/total as well: both
// data planes size every endpoint alike however uneven the localities.
//
// grpc-js instead weighs an endpoint by locality weight × endpoint weight,
// so for grpc-js every locality of a hash pool weighs 1: its ring then
// matches grpc-go's. (Its other balancers weigh localities as grpc-go's
// do, and keep the sums.)
func buildEndpoints(p *fleet.Pool, kind Kind) (*endpointv3.ClusterLoadAssignment, error) {
	// Bucket endpoints by locality. Pools have few localities: scan a
	// slice, and switch to a map if there are many.
	var locs []fleet.Locality
	var byLoc map[fleet.Locality]int
	idx := make([]int, len(p.Endpoints)) // endpoint -> bucket
	for i := range p.Endpoints {
		l := p.Endpoints[i].Locality
		var b int
		if byLoc != nil {
			var ok bool
			if b, ok = byLoc[l]; !ok {
				b = -1
			}
		} else {
			b = slices.Index(locs, l)
		}
		if b < 0 {
			b = len(locs)
			locs = append(locs, l)
			if byLoc != nil {
				byLoc[l] = b
			} else if len(locs) > 16 {
				byLoc = make(map[fleet.Locality]int)
				for j, l := range locs {
					byLoc[l] = j
				}
			}
		}
		idx[i] = b
	}
	order := make([]int, len(locs)) // sorted position -> bucket
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmpLocality(locs[a], locs[b]) })

	// Allocate the messages of all endpoints in a few slabs: this path runs
	// on every weight or health change.
	n := len(p.Endpoints)
	var (
		lbEps   = make([]endpointv3.LbEndpoint, n)
		hostIDs = make([]endpointv3.LbEndpoint_Endpoint, n)
		eps     = make([]endpointv3.Endpoint, n)
		addrs   = make([]corev3.Address, n)
		sockets = make([]corev3.Address_SocketAddress, n)
		sas     = make([]corev3.SocketAddress, n)
		ports   = make([]corev3.SocketAddress_PortValue, n)
		weights = make([]wrapperspb.UInt32Value, n)
		mds     = make([]corev3.Metadata, n)
		structs = make([]structpb.Struct, n)
		values  = make([]structpb.Value, n)
		strs    = make([]structpb.Value_StringValue, n)
	)
	lles := make([]endpointv3.LocalityLbEndpoints, len(locs))
	llocs := make([]corev3.Locality, len(locs))
	lweights := make([]wrapperspb.UInt32Value, len(locs))
	cla := &endpointv3.ClusterLoadAssignment{
		ClusterName: p.Name,
		Endpoints:   make([]*endpointv3.LocalityLbEndpoints, len(locs)),
	}
	pos := make([]int, len(locs)) // bucket -> sorted position
	for i, b := range order {
		pos[b] = i
		l := locs[b]
		llocs[i] = corev3.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone}
		lles[i].Locality = &llocs[i]
		cla.Endpoints[i] = &lles[i]
	}
	sums := make([]uint32, len(locs)) // fits: prepare checked the pool total
	for i := range p.Endpoints {
		e := &p.Endpoints[i]
		ports[i].PortValue = e.Port
		sas[i] = corev3.SocketAddress{Protocol: corev3.SocketAddress_TCP, Address: e.Host, PortSpecifier: &ports[i]}
		sockets[i].SocketAddress = &sas[i]
		addrs[i].Address = &sockets[i]
		eps[i].Address = &addrs[i]
		hostIDs[i].Endpoint = &eps[i]
		weights[i].Value = e.Weight
		strs[i].StringValue = e.HashKey
		values[i].Kind = &strs[i]
		structs[i].Fields = map[string]*structpb.Value{"hash_key": &values[i]}
		mds[i].FilterMetadata = map[string]*structpb.Struct{"envoy.lb": &structs[i]}
		lbEps[i] = endpointv3.LbEndpoint{
			HostIdentifier:      &hostIDs[i],
			HealthStatus:        healthStatus[e.Health],
			LoadBalancingWeight: &weights[i],
			Metadata:            &mds[i],
		}
		k := pos[idx[i]]
		lles[k].LbEndpoints = append(lles[k].LbEndpoints, &lbEps[i])
		sums[k] += e.Weight
	}
	unitLocalities := kind == GRPCJS && p.Balancer == fleet.ConsistentHash
	for i := range lles {
		lweights[i].Value = sums[i]
		if unitLocalities {
			lweights[i].Value = 1
		}
		lles[i].LoadBalancingWeight = &lweights[i]
	}
	if err := cla.ValidateAll(); err != nil {
		return nil, err
	}
	return cla, nil
}

func cmpLocality(a, b fleet.Locality) int {
	return cmp.Or(
		cmp.Compare(a.Region, b.Region),
		cmp.Compare(a.Zone, b.Zone),
		cmp.Compare(a.SubZone, b.SubZone),
	)
}
