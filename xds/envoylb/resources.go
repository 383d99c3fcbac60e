package envoylb

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	lbcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/common/v3"
	maglevv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
)

// ErrNotHashing is returned for a cluster whose load balancer does not
// hash (round robin, least request, random): it has no table.
var ErrNotHashing = errors.New("the cluster's load balancer does not hash")

// Load-balancing policies Envoy knows without extensions that hash, and
// those that do not; Envoy takes the first of a cluster's
// load_balancing_policy list that it knows.
var (
	hashingPolicies = map[string]bool{
		"type.googleapis.com/envoy.extensions.load_balancing_policies.maglev.v3.Maglev":      true,
		"type.googleapis.com/envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash": true,
	}
	otherPolicies = map[string]bool{
		"type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin":     true,
		"type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest": true,
		"type.googleapis.com/envoy.extensions.load_balancing_policies.random.v3.Random":              true,
	}
)

// ClusterConfig reads a cluster's consistent-hashing configuration:
// the first policy of load_balancing_policy Envoy knows, or the legacy
// lb_policy; the common_lb_config's panic threshold. ErrNotHashing if it
// does not hash.
func ClusterConfig(c *clusterv3.Cluster) (Config, HashPolicy, error) {
	var cfg Config
	if pt := c.GetCommonLbConfig().GetHealthyPanicThreshold(); pt != nil {
		// PROTOBUF_PERCENT_TO_ROUNDED_INTEGER_OR_DEFAULT: rounded; 0 is off.
		cfg.PanicThreshold = float64(int64(pt.GetValue() + 0.5))
		if cfg.PanicThreshold == 0 {
			cfg.PanicThreshold = -1
		}
	}
	var chc *lbcommonv3.ConsistentHashingLbConfig
	if lbp := c.GetLoadBalancingPolicy(); lbp != nil {
		for _, p := range lbp.GetPolicies() {
			a := p.GetTypedExtensionConfig().GetTypedConfig()
			url := a.GetTypeUrl()
			if otherPolicies[url] {
				return cfg, nil, ErrNotHashing
			}
			if !hashingPolicies[url] {
				continue
			}
			m, err := a.UnmarshalNew()
			if err != nil {
				return cfg, nil, err
			}
			switch m := m.(type) {
			case *maglevv3.Maglev:
				cfg.Algorithm = Maglev
				cfg.TableSize = m.GetTableSize().GetValue()
				cfg.LocalityWeighted = m.GetLocalityWeightedLbConfig() != nil
				chc = m.GetConsistentHashingLbConfig()
			case *ringhashv3.RingHash:
				if m.GetHashFunction() != ringhashv3.RingHash_XX_HASH {
					return cfg, nil, errors.New("ring hash: only XX_HASH is modelled")
				}
				cfg.Algorithm = RingHash
				cfg.MinRingSize = m.GetMinimumRingSize().GetValue()
				cfg.MaxRingSize = m.GetMaximumRingSize().GetValue()
				cfg.LocalityWeighted = m.GetLocalityWeightedLbConfig() != nil
				chc = m.GetConsistentHashingLbConfig()
				if chc == nil {
					// The deprecated fields count only without it.
					cfg.UseHostname = m.GetUseHostnameForHashing()
					cfg.HashBalanceFactor = m.GetHashBalanceFactor().GetValue()
				}
			}
			return withHashing(cfg, chc)
		}
		return cfg, nil, errors.New("no load-balancing policy Envoy knows")
	}
	common := c.GetCommonLbConfig()
	cfg.LocalityWeighted = common.GetLocalityWeightedLbConfig() != nil
	if ch := common.GetConsistentHashingLbConfig(); ch != nil {
		cfg.UseHostname = ch.GetUseHostnameForHashing()
		cfg.HashBalanceFactor = ch.GetHashBalanceFactor().GetValue()
	}
	switch c.GetLbPolicy() {
	case clusterv3.Cluster_MAGLEV:
		cfg.Algorithm = Maglev
		cfg.TableSize = c.GetMaglevLbConfig().GetTableSize().GetValue()
	case clusterv3.Cluster_RING_HASH:
		rh := c.GetRingHashLbConfig()
		if rh.GetHashFunction() != clusterv3.Cluster_RingHashLbConfig_XX_HASH {
			return cfg, nil, errors.New("ring hash: only XX_HASH is modelled")
		}
		cfg.Algorithm = RingHash
		cfg.MinRingSize = rh.GetMinimumRingSize().GetValue()
		cfg.MaxRingSize = rh.GetMaximumRingSize().GetValue()
	default:
		return cfg, nil, ErrNotHashing
	}
	return cfg, nil, nil
}

func withHashing(cfg Config, chc *lbcommonv3.ConsistentHashingLbConfig) (Config, HashPolicy, error) {
	if chc == nil {
		return cfg, nil, nil
	}
	cfg.UseHostname = chc.GetUseHostnameForHashing()
	cfg.HashBalanceFactor = chc.GetHashBalanceFactor().GetValue()
	hp, err := CompileHashPolicy(chc.GetHashPolicy())
	return cfg, hp, err
}

// Hosts reads an assignment's endpoints of priority 0 in Envoy's host-set
// order (as listed), with their localities' weights. Endpoints of other
// priorities are an error: kvxds sends none, and failover is not
// modelled.
func Hosts(cla *endpointv3.ClusterLoadAssignment) ([]Host, []uint32, error) {
	n := 0
	for _, lle := range cla.GetEndpoints() {
		n += len(lle.GetLbEndpoints())
	}
	hosts := make([]Host, 0, n)
	lweights := make([]uint32, 0, len(cla.GetEndpoints()))
	for l, lle := range cla.GetEndpoints() {
		if lle.GetPriority() != 0 {
			return nil, nil, fmt.Errorf("%s: priority %d is not modelled", cla.GetClusterName(), lle.GetPriority())
		}
		lweights = append(lweights, lle.GetLoadBalancingWeight().GetValue())
		for _, e := range lle.GetLbEndpoints() {
			ep := e.GetEndpoint()
			if ep == nil {
				return nil, nil, fmt.Errorf("%s: named endpoints are not modelled", cla.GetClusterName())
			}
			sa := ep.GetAddress().GetSocketAddress()
			h := Host{
				Address:  address(sa),
				Hostname: ep.GetHostname(),
				Weight:   e.GetLoadBalancingWeight().GetValue(),
				Health:   health(e.GetHealthStatus()),
				Locality: l,
			}
			if v := e.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"]; v != nil {
				// Only a string counts (any other type falls back to the
				// address).
				h.HashKey = v.GetStringValue()
			}
			hosts = append(hosts, h)
		}
	}
	return hosts, lweights, nil
}

// address is the socket address as Envoy prints it.
func address(sa *corev3.SocketAddress) string {
	var buf [64]byte
	b := buf[:0]
	if a, err := netip.ParseAddr(sa.GetAddress()); err == nil && a.Is6() && !a.Is4In6() {
		b = a.AppendTo(append(b, '['))
		b = append(b, ']')
	} else {
		b = append(b, sa.GetAddress()...)
	}
	return string(strconv.AppendUint(append(b, ':'), uint64(sa.GetPortValue()), 10))
}

func health(s corev3.HealthStatus) Health {
	switch s {
	case corev3.HealthStatus_UNKNOWN, corev3.HealthStatus_HEALTHY:
		return Healthy
	case corev3.HealthStatus_DEGRADED:
		return Degraded
	case corev3.HealthStatus_DRAINING:
		return Excluded
	}
	return Unhealthy
}

// NewBalancer builds the balancer an Envoy builds from a cluster and its
// assignment, as served.
func NewBalancer(c *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) (*Balancer, error) {
	cfg, hp, err := ClusterConfig(c)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.GetName(), err)
	}
	hosts, lweights, err := Hosts(cla)
	if err != nil {
		return nil, err
	}
	cfg.LocalityWeights = lweights
	b, err := New(hosts, cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.GetName(), err)
	}
	b.HashPolicy = hp
	return b, nil
}

// Router routes requests as an Envoy does with a set of served
// resources: the route configuration's first matching route, its hash
// policy, and the cluster's table.
type Router struct {
	routes   map[string]*routev3.RouteConfiguration
	clusters map[string]*Balancer
	// keyless are the clusters that do not hash.
	keyless map[string]bool
	// compiled hash policies and header regexes, by route.
	policies map[*routev3.Route]HashPolicy
	regexes  map[*routev3.HeaderMatcher]*regexp.Regexp
	// from is what each cluster's table was built from.
	from map[string]builtFrom
}

type builtFrom struct {
	cluster *clusterv3.Cluster
	cla     *endpointv3.ClusterLoadAssignment
}

// NewRouter builds the tables of every cluster and reads every route.
func NewRouter(routes []*routev3.RouteConfiguration, clusters []*clusterv3.Cluster, clas []*endpointv3.ClusterLoadAssignment) (*Router, error) {
	return NewRouterFrom(nil, routes, clusters, clas)
}

// NewRouterFrom is NewRouter keeping prev's table of every cluster whose
// Cluster and assignment are unchanged, as Envoy rebuilds a cluster's
// load balancer only when its own hosts change. prev may be nil.
func NewRouterFrom(prev *Router, routes []*routev3.RouteConfiguration, clusters []*clusterv3.Cluster, clas []*endpointv3.ClusterLoadAssignment) (*Router, error) {
	r := &Router{
		routes:   map[string]*routev3.RouteConfiguration{},
		clusters: map[string]*Balancer{},
		keyless:  map[string]bool{},
		policies: map[*routev3.Route]HashPolicy{},
		regexes:  map[*routev3.HeaderMatcher]*regexp.Regexp{},
		from:     map[string]builtFrom{},
	}
	byName := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, cla := range clas {
		byName[cla.GetClusterName()] = cla
	}
	for _, c := range clusters {
		name := c.GetEdsClusterConfig().GetServiceName()
		if name == "" {
			name = c.GetName()
		}
		cla, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("cluster %s: no assignment %s", c.GetName(), name)
		}
		r.from[c.GetName()] = builtFrom{c, cla}
		if prev != nil {
			if was, ok := prev.from[c.GetName()]; ok && proto.Equal(was.cluster, c) && proto.Equal(was.cla, cla) {
				if b := prev.clusters[c.GetName()]; b != nil {
					r.clusters[c.GetName()] = b
				} else {
					r.keyless[c.GetName()] = prev.keyless[c.GetName()]
				}
				continue
			}
		}
		b, err := NewBalancer(c, cla)
		switch {
		case errors.Is(err, ErrNotHashing):
			r.keyless[c.GetName()] = true
		case err != nil:
			return nil, err
		default:
			r.clusters[c.GetName()] = b
		}
	}
	for _, rc := range routes {
		r.routes[rc.GetName()] = rc
		for _, vh := range rc.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				hp, err := CompileHashPolicy(rt.GetRoute().GetHashPolicy())
				if err != nil {
					return nil, fmt.Errorf("route configuration %s: %w", rc.GetName(), err)
				}
				r.policies[rt] = hp
				for _, hm := range rt.GetMatch().GetHeaders() {
					if re := hm.GetStringMatch().GetSafeRegex(); re != nil {
						x, err := regexp.Compile(`^(?:` + re.GetRegex() + `)$`)
						if err != nil {
							return nil, fmt.Errorf("route configuration %s: %w", rc.GetName(), err)
						}
						r.regexes[hm] = x
					}
				}
			}
		}
	}
	return r, nil
}

// Balancer is the balancer of a hashing cluster, or nil.
func (r *Router) Balancer(cluster string) *Balancer { return r.clusters[cluster] }

// Decision is where a request goes.
type Decision struct {
	Cluster string
	// Hashed says the cluster hashes and the request produced a hash
	// (Hash); a hashing cluster without one picks at random.
	Hashed bool
	Hash   uint64
	// Host indexes the cluster balancer's hosts, -1 if the cluster does
	// not hash, the request has no hash, or the table is empty.
	Host int
}

// Pick routes req through route configuration name (its first virtual
// host matching domain "*" or the only one), with bounded load applied
// if load is not nil.
func (r *Router) Pick(name string, req *Request, load *Load) (Decision, error) {
	rc, ok := r.routes[name]
	if !ok {
		return Decision{}, fmt.Errorf("no route configuration %s", name)
	}
	for _, vh := range rc.GetVirtualHosts() {
		for _, rt := range vh.GetRoutes() {
			ok, err := r.matches(rt.GetMatch(), req)
			if err != nil {
				return Decision{}, err
			}
			if !ok {
				continue
			}
			d := Decision{Cluster: rt.GetRoute().GetCluster(), Host: -1}
			if d.Cluster == "" {
				return d, errors.New("only routes to one cluster are modelled")
			}
			b := r.clusters[d.Cluster]
			if b == nil {
				if !r.keyless[d.Cluster] {
					return d, fmt.Errorf("no cluster %s", d.Cluster)
				}
				return d, nil
			}
			hp := r.policies[rt]
			if len(b.HashPolicy) > 0 {
				hp = b.HashPolicy
			}
			if d.Hash, d.Hashed = hp.Hash(req); d.Hashed {
				d.Host = b.Choose(d.Hash, load)
			}
			return d, nil
		}
	}
	return Decision{Host: -1}, errors.New("no route matches")
}

// matches reports whether m matches req: a path prefix, and header and
// query-parameter matchers of the kinds kvxds sends.
func (r *Router) matches(m *routev3.RouteMatch, req *Request) (bool, error) {
	path, _, _ := strings.Cut(req.Path, "?")
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		if !strings.HasPrefix(path, p.Prefix) {
			return false, nil
		}
	case *routev3.RouteMatch_Path:
		if path != p.Path {
			return false, nil
		}
	default:
		return false, fmt.Errorf("path matcher %T is not modelled", p)
	}
	for _, hm := range m.GetHeaders() {
		vs := req.Values(hm.GetName())
		var ok bool
		switch s := hm.GetHeaderMatchSpecifier().(type) {
		case *routev3.HeaderMatcher_PresentMatch:
			ok = len(vs) > 0 == s.PresentMatch
		case *routev3.HeaderMatcher_StringMatch:
			// A header matcher sees repeated headers joined with ",".
			v, present := strings.Join(vs, ","), len(vs) > 0
			switch sm := s.StringMatch.GetMatchPattern().(type) {
			case *matcherv3.StringMatcher_Exact:
				ok = present && v == sm.Exact
				if s.StringMatch.GetIgnoreCase() {
					ok = present && strings.EqualFold(v, sm.Exact)
				}
			case *matcherv3.StringMatcher_SafeRegex:
				ok = present && r.regexes[hm].MatchString(v)
			default:
				return false, fmt.Errorf("string matcher %T is not modelled", sm)
			}
		default:
			return false, fmt.Errorf("header matcher %T is not modelled", s)
		}
		if ok == hm.GetInvertMatch() {
			return false, nil
		}
	}
	for _, qm := range m.GetQueryParameters() {
		if !qm.GetPresentMatch() {
			return false, errors.New("only present query-parameter matchers are modelled")
		}
		if _, ok := QueryValue(req.Path, qm.GetName()); !ok {
			return false, nil
		}
	}
	return true, nil
}
