package translate

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/kvxds/kvxds/fleet"
)

func buildRoute(p *fleet.Pool, pl *fleet.Plan, kind Kind) (*routev3.RouteConfiguration, error) {
	// Every key is terminal: the first one present in the request decides
	// the hash, later ones are only fallbacks (Envoy and gRPC both stop at
	// the first terminal policy that produced a hash). gRPC ignores
	// cookie and query-parameter policies.
	keys := routeKeys(p, kind)
	hp := hashPolicies(keys)
	action := func(cluster string, hp []*routev3.RouteAction_HashPolicy) *routev3.Route_Route {
		return routeAction(p, cluster, hp)
	}
	// Adapter routes come first: an adapter's cache is its own, whatever
	// the tenant (see adapterRoutes). Group routes next: their header
	// matches decide before the pool's own routes (see groupTables).
	routes := adapterRoutes(p, kind, keys)
	routes = append(routes, groupRoutes(p, kind, keys)...)
	// Hot keys next: their routes match a key's value, before the routes
	// that match its presence (see hotRoutes).
	routes = append(routes, hotRoutes(p, kind)...)
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
				m.Headers = []*routev3.HeaderMatcher{cookieMatcher(k.Cookie)}
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
	routes = append(routes, stagedRoutes(p, kind)...)
	if prefills(p, kind) {
		md, err := prefillMetadata(p)
		if err != nil {
			return nil, fmt.Errorf("prefill table: %w", err)
		}
		for _, r := range routes {
			r.Metadata = md
		}
	}
	if Picks(p, kind) {
		md, err := pickMetadata(pickTable(p, pl, kind))
		if err != nil {
			return nil, err
		}
		for _, r := range routes {
			r.Metadata = md
		}
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

// cookieMatcher matches requests that carry cookie name: a full match
// over the Cookie header, whose pairs are separated by "; " (or ", "
// where a header matcher sees repeated headers joined).
func cookieMatcher(name string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{
		Name: "cookie",
		HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{
				Regex: `(.*[;,]\s*)?` + regexp.QuoteMeta(name) + `=.*`,
			}},
		}},
	}
}

// groupRoutes returns the routes of p's groups for kind, in group
// order, one per value; keys are the pool's route keys for the kind.
func groupRoutes(p *fleet.Pool, kind Kind, keys []fleet.HashKey) []*routev3.Route {
	if len(p.Groups) == 0 {
		return nil
	}
	var routes []*routev3.Route
	for _, g := range p.Groups {
		if !g.Routed() {
			// Its cluster is served without routes (stagedRoutes).
			continue
		}
		inner := slices.DeleteFunc(slices.Clone(keys), func(k fleet.HashKey) bool { return k.Header == g.Header })
		hp := hashPolicies(inner)
		cluster := p.Name
		if groupTables(kind) {
			cluster = g.ClusterName(p.Name)
		}
		for _, v := range g.Values {
			m := prefixMatch()
			m.Headers = []*routev3.HeaderMatcher{{
				Name: g.Header,
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v},
				}},
			}}
			routes = append(routes, &routev3.Route{Match: m, Action: routeAction(p, cluster, hp)})
		}
	}
	return routes
}

// adapterRoutes returns the routes of p's placed adapters for kind, in
// name order: each matches the adapter header exactly and hashes on the
// pool's route keys (less the adapter header) inside the adapter's
// cluster, or, for a kind without group tables (grpc-js), inside the
// pool's cluster; none where Envoy picks the replica (Picks), whose pick
// table places adapters. Base-model requests and adapters not placed carry no
// matching header value and take the pool's own routes.
func adapterRoutes(p *fleet.Pool, kind Kind, keys []fleet.HashKey) []*routev3.Route {
	if p.LoRA == nil || len(p.Adapters) == 0 || Picks(p, kind) {
		// Where Envoy picks the replica, the pick table places adapters.
		return nil
	}
	header := p.LoRA.Header
	hp := hashPolicies(slices.DeleteFunc(slices.Clone(keys), func(k fleet.HashKey) bool { return strings.ToLower(k.Header) == header }))
	routes := make([]*routev3.Route, 0, len(p.Adapters))
	for _, a := range p.Adapters {
		if !a.Routed() {
			// Its cluster is served without a route (stagedRoutes).
			continue
		}
		cluster := p.Name
		if groupTables(kind) {
			cluster = a.ClusterName(p.Name)
		}
		m := prefixMatch()
		m.Headers = []*routev3.HeaderMatcher{{
			Name: header,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_Exact{Exact: a.Name},
			}},
		}}
		routes = append(routes, &routev3.Route{Match: m, Action: routeAction(p, cluster, hp)})
	}
	return routes
}

// StagedHeader is the header of staged routes (stagedRoutes), which no
// request reaches.
const StagedHeader = "x-kvxds-staged"

// stagedRoutes returns, for a kind with group tables, one route per
// group or adapter cluster served without its routes (fleet.StageAdding,
// fleet.StageLeaving), after the pool's catch-all route, so that no
// request ever matches it (it also matches only StagedHeader set to the
// cluster's name). It is there for gRPC clients: they fetch only the
// clusters that their routes name, and build a cluster's balancer only
// once a route names it; and grpc-go installs a new route table before
// its balancer has the new clusters, so an RPC matching a route to a
// cluster new to it in between fails ("unknown cluster selected for
// RPC"). Named by an unreachable route first, the cluster is fetched and
// its balancer built before any request can be routed to it, and kept
// until after the last request could be. Envoy fetches every cluster
// and needs none; grpc-js has no group tables.
func stagedRoutes(p *fleet.Pool, kind Kind) []*routev3.Route {
	if kind == Envoy || !groupTables(kind) {
		return nil
	}
	var clusters []string
	for _, g := range p.Groups {
		if !g.Routed() {
			clusters = append(clusters, g.ClusterName(p.Name))
		}
	}
	for _, a := range p.Adapters {
		if !a.Routed() {
			clusters = append(clusters, a.ClusterName(p.Name))
		}
	}
	routes := make([]*routev3.Route, 0, len(clusters))
	for _, c := range clusters {
		m := prefixMatch()
		m.Headers = []*routev3.HeaderMatcher{{
			Name: StagedHeader,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_Exact{Exact: c},
			}},
		}}
		routes = append(routes, &routev3.Route{Match: m, Action: routeAction(p, c, nil)})
	}
	return routes
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

// MeshRouteHashPolicy returns the route hash policies of pool's key chain
// that an Envoy configured elsewhere can use on its route to the mesh
// cluster (header, cookie and query parameter keys; body keys need kvxds's
// own listener), each terminal as in kvxds's routes.
func MeshRouteHashPolicy(m fleet.Model, pool string) ([]*routev3.RouteAction_HashPolicy, error) {
	if err := check(m, Envoy); err != nil {
		return nil, err
	}
	f := m.Fleet()
	i := slices.IndexFunc(f.Pools, func(p fleet.Pool) bool { return p.Name == pool })
	if i < 0 {
		return nil, fmt.Errorf("translate: no pool %q", pool)
	}
	hp := hashPolicies(f.Pools[i].Hash.Keys)
	for _, h := range hp {
		if err := h.ValidateAll(); err != nil {
			return nil, fmt.Errorf("translate: pool %q: hash policy: %w", pool, err)
		}
	}
	return hp, nil
}
