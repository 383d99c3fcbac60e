package translate

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/inflight"
	"github.com/kvxds/kvxds/xds/ringhash"
)

// genFleet is a synthetic fleet: pools × eps endpoints over three zones,
// with varied weights and health.
func genFleet(pools, eps int) fleet.Fleet {
	var f fleet.Fleet
	for i := range pools {
		p := fleet.Pool{
			Name: fmt.Sprintf("pool-%02d", i),
			Settings: fleet.Settings{
				Port:         uint32(10000 + i),
				RouteTimeout: time.Duration(i) * time.Second,
				Hash: fleet.Hash{
					Keys: []fleet.HashKey{{Header: "x-session-id"}, {Cookie: "sid"}, {QueryParameter: "session"}},
				},
			},
		}
		if i%2 == 1 {
			p.Hash.Algorithm = fleet.RingHash
			p.Hash.MaxRingSize = 1 << 16
		} else {
			p.Hash.BalanceFactor = 150
		}
		for j := range eps {
			p.Endpoints = append(p.Endpoints, fleet.Endpoint{
				Host:     fmt.Sprintf("10.%d.%d.%d", i, j/250, j%250+1),
				Port:     8000,
				Weight:   uint32(1 + j%4),
				Health:   fleet.Health(j % 7 % 4),
				Locality: fleet.Locality{Region: "us-east1", Zone: fmt.Sprintf("us-east1-%c", 'a'+j%3)},
				HashKey:  fmt.Sprintf("%s-%03d", p.Name, j),
			})
		}
		f.Pools = append(f.Pools, p)
	}
	return f
}

// shuffled returns a deep-enough copy of f with pools and endpoints in a
// random order.
func shuffled(f fleet.Fleet, rng *rand.Rand) fleet.Fleet {
	out := fleet.Fleet{Pools: slices.Clone(f.Pools)}
	for i := range out.Pools {
		out.Pools[i].Endpoints = slices.Clone(out.Pools[i].Endpoints)
		rng.Shuffle(len(out.Pools[i].Endpoints), func(a, b int) {
			e := out.Pools[i].Endpoints
			e[a], e[b] = e[b], e[a]
		})
	}
	rng.Shuffle(len(out.Pools), func(a, b int) { out.Pools[a], out.Pools[b] = out.Pools[b], out.Pools[a] })
	return out
}

func marshalAll[T proto.Message](t testing.TB, items []T) [][]byte {
	t.Helper()
	var out [][]byte
	for _, m := range items {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// translateFleet prepares f and translates it.
func translateFleet(f fleet.Fleet, kind Kind) (*Resources, error) {
	m, err := fleet.Prepare(f)
	if err != nil {
		return nil, err
	}
	return Translate(m, kind)
}

func retranslateFleet(prev *Resources, f fleet.Fleet, kind Kind) (*Resources, error) {
	m, err := fleet.Prepare(f)
	if err != nil {
		return nil, err
	}
	return Retranslate(prev, m, kind)
}

func retranslateAllFleet(prev map[Kind]*Resources, f fleet.Fleet) (map[Kind]*Resources, error) {
	m, err := fleet.Prepare(f)
	if err != nil {
		return nil, err
	}
	return RetranslateAll(prev, m)
}

func mustTranslate(t testing.TB, f fleet.Fleet, kind Kind) *Resources {
	t.Helper()
	r, err := translateFleet(f, kind)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustSnapshot(t testing.TB, r *Resources) *cache.Snapshot {
	t.Helper()
	s, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func allFixtures(t *testing.T) map[string]fleet.Fleet {
	fx := map[string]fleet.Fleet{"generated": genFleet(4, 30)}
	for _, name := range []string{"chat", "ringhash", "multi", "empty"} {
		fx[name] = loadFleet(t, "testdata/in/"+name+".yaml")
	}
	return fx
}

type validated interface {
	proto.Message
	ValidateAll() error
}

// validateDeep runs ValidateAll on m and on every Any nested in it, which
// ValidateAll itself does not unpack.
func validateDeep(t *testing.T, m validated) {
	t.Helper()
	if err := m.ValidateAll(); err != nil {
		t.Errorf("%T: %v", m, err)
	}
	var walk func(a *anypb.Any)
	walk = func(a *anypb.Any) {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Errorf("unpack %s: %v", a.GetTypeUrl(), err)
			return
		}
		if v, ok := inner.(validated); ok {
			if err := v.ValidateAll(); err != nil {
				t.Errorf("%s: %v", a.GetTypeUrl(), err)
			}
		}
		if hcm, ok := inner.(*hcmv3.HttpConnectionManager); ok {
			for _, f := range hcm.GetHttpFilters() {
				walk(f.GetTypedConfig())
			}
		}
	}
	switch m := m.(type) {
	case *listenerv3.Listener:
		if a := m.GetApiListener().GetApiListener(); a != nil {
			walk(a)
		}
		for _, fc := range m.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				walk(f.GetTypedConfig())
			}
		}
	case *clusterv3.Cluster:
		for _, p := range m.GetLoadBalancingPolicy().GetPolicies() {
			walk(p.GetTypedExtensionConfig().GetTypedConfig())
		}
	}
}

func TestAllResourcesValidate(t *testing.T) {
	for name, f := range allFixtures(t) {
		for _, kind := range Kinds {
			r := mustTranslate(t, f, kind)
			n, keyless := len(f.Pools), 0
			for _, p := range f.Normalize().Pools {
				if p.Balancer == fleet.ConsistentHash && p.Hash.Keyless != fleet.Random && kind != GRPCJS {
					keyless++
				}
			}
			if len(r.Listeners) != n || len(r.Routes) != n || len(r.Clusters) != n+keyless || len(r.Endpoints) != n {
				t.Fatalf("%s/%v: want %d of each resource and %d more clusters, got %d/%d/%d/%d", name, kind, n, keyless,
					len(r.Listeners), len(r.Routes), len(r.Clusters), len(r.Endpoints))
			}
			for _, m := range r.Listeners {
				validateDeep(t, m)
			}
			for _, m := range r.Routes {
				validateDeep(t, m)
			}
			for _, m := range r.Clusters {
				validateDeep(t, m)
			}
			for _, m := range r.Endpoints {
				validateDeep(t, m)
			}
			for i := 1; i < n; i++ {
				if r.Listeners[i-1].Name >= r.Listeners[i].Name || r.Routes[i-1].Name >= r.Routes[i].Name ||
					r.Clusters[i-1].Name >= r.Clusters[i].Name || r.Endpoints[i-1].ClusterName >= r.Endpoints[i].ClusterName {
					t.Errorf("%s/%v: resources not sorted by name", name, kind)
				}
			}
		}
	}
}

func TestEmptyFleet(t *testing.T) {
	for _, kind := range Kinds {
		r := mustTranslate(t, fleet.Fleet{}, kind)
		if len(r.Listeners)+len(r.Routes)+len(r.Clusters)+len(r.Endpoints) != 0 {
			t.Errorf("%v: resources from an empty fleet", kind)
		}
		s := mustSnapshot(t, r)
		if v := s.GetVersion(resource.ClusterType); len(v) != 16 {
			t.Errorf("%v: empty cluster version %q", kind, v)
		}
	}
}

// TestKinds: Envoy and gRPC clients share routes but not listeners, hash
// clusters or localities; grpc-js has no keyless cluster; every gRPC
// client gets each pool as one locality.
func TestKinds(t *testing.T) {
	f := genFleet(3, 10)
	e, g, js := mustTranslate(t, f, Envoy), mustTranslate(t, f, GRPC), mustTranslate(t, f, GRPCJS)
	if Version(e.Routes) != Version(g.Routes) {
		t.Error("routes differ between Envoy and gRPC")
	}
	for i := range e.Listeners {
		el, gl, jl := e.Listeners[i], g.Listeners[i], js.Listeners[i]
		if el.Name != gl.Name || el.Name != jl.Name {
			t.Errorf("listener names differ: %q vs %q vs %q", el.Name, gl.Name, jl.Name)
		}
		if el.GetAddress() == nil || el.GetApiListener() != nil {
			t.Errorf("envoy listener %q: want address and no api_listener", el.Name)
		}
		for _, l := range []*listenerv3.Listener{gl, jl} {
			if l.GetAddress() != nil || l.GetApiListener() == nil || len(l.GetFilterChains()) != 0 {
				t.Errorf("grpc listener %q: want api_listener only", l.Name)
			}
		}
	}
	for _, c := range e.Clusters {
		if c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN || len(c.GetLoadBalancingPolicy().GetPolicies()) == 0 {
			t.Errorf("envoy cluster %q: want load_balancing_policy only", c.Name)
		}
	}
	for _, r := range []*Resources{g, js} {
		for _, c := range r.Clusters {
			if strings.HasSuffix(c.Name, fleet.KeylessSuffix) {
				continue
			}
			rh := c.GetRingHashLbConfig()
			if c.GetLbPolicy() != clusterv3.Cluster_RING_HASH || c.GetLoadBalancingPolicy() != nil || rh == nil {
				t.Fatalf("grpc cluster %q: want legacy ring hash, got %v", c.Name, c)
			}
			if rh.GetMinimumRingSize().GetValue() != rh.GetMaximumRingSize().GetValue() || rh.GetMinimumRingSize().GetValue() == 0 {
				t.Errorf("grpc cluster %q: ring size %v..%v, want one fixed size", c.Name, rh.GetMinimumRingSize(), rh.GetMaximumRingSize())
			}
		}
	}
	if len(js.Clusters) != len(f.Pools) || len(g.Clusters) != 2*len(f.Pools) {
		t.Errorf("clusters: grpc %d, grpc-js %d; want 2 and 1 per pool", len(g.Clusters), len(js.Clusters))
	}
	for _, rc := range js.Routes {
		for _, rt := range rc.GetVirtualHosts()[0].GetRoutes() {
			if strings.HasSuffix(rt.GetRoute().GetCluster(), fleet.KeylessSuffix) {
				t.Errorf("grpc-js route configuration %q routes to %s", rc.Name, rt.GetRoute().GetCluster())
			}
		}
	}
	for _, r := range []*Resources{g, js} {
		for _, cla := range r.Endpoints {
			if n := len(cla.GetEndpoints()); n != 1 {
				t.Errorf("gRPC %q: %d localities, want 1", cla.ClusterName, n)
			}
		}
	}
	zones := 0
	for _, cla := range e.Endpoints {
		zones = max(zones, len(cla.GetEndpoints()))
	}
	if zones < 2 {
		t.Error("Envoy's assignments have one locality each; the fleet should span zones")
	}
	if _, err := translateFleet(f, Kind(7)); err == nil {
		t.Error("unknown kind: want error")
	}
}

func TestDeterminism(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for name, f := range allFixtures(t) {
		for _, kind := range Kinds {
			ref := mustTranslate(t, f, kind)
			refSnap := mustSnapshot(t, ref)
			for range 10 {
				r := mustTranslate(t, shuffled(f, rng), kind)
				if typ := differingType(t, ref, r); typ != "" {
					t.Fatalf("%s/%v: shuffled input gives different %s bytes", name, kind, typ)
				}
				s := mustSnapshot(t, r)
				for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType} {
					if s.GetVersion(typ) != refSnap.GetVersion(typ) {
						t.Fatalf("%s/%v: %s version differs after shuffle", name, kind, typ)
					}
					if !maps.Equal(s.GetVersionMap(typ), refSnap.GetVersionMap(typ)) {
						t.Fatalf("%s/%v: %s version map differs after shuffle", name, kind, typ)
					}
				}
			}
		}
	}
}

func TestEndpointsFastPath(t *testing.T) {
	base := genFleet(5, 40)
	changed := shuffled(base, rand.New(rand.NewPCG(7, 8)))
	for i := range changed.Pools {
		for j := range changed.Pools[i].Endpoints {
			changed.Pools[i].Endpoints[j].Weight = uint32(1 + (i+j)%5)
		}
	}
	for _, kind := range Kinds {
		prev := mustTranslate(t, base, kind)
		prevEps := prev.Endpoints[0]
		full := mustTranslate(t, changed, kind)
		fast, err := retranslateFleet(prev, changed, kind)
		if err != nil {
			t.Fatal(err)
		}
		if typ := differingType(t, fast, full); typ != "" {
			t.Fatalf("%v: Retranslate differs from Translate in its %s", kind, typ)
		}
		if prev.Endpoints[0] != prevEps || &prev.Listeners[0] != &fast.Listeners[0] {
			t.Fatal("Retranslate modified prev or did not share its listeners")
		}
		sFast, sFull := versions(mustSnapshot(t, fast)), versions(mustSnapshot(t, full))
		if !maps.Equal(sFast, sFull) {
			t.Errorf("%v: fast path versions %v, full rebuild %v", kind, sFast, sFull)
		}
		if _, err := retranslateFleet(prev, fleet.Fleet{Pools: []fleet.Pool{{Name: "x"}}}, kind); err == nil {
			t.Error("Retranslate of an invalid fleet: want error")
		}
	}

	// RetranslateAll gives every kind what Translate gives it, and
	// kinds that receive the same ClusterLoadAssignments share them.
	prev := map[Kind]*Resources{}
	for _, kind := range Kinds {
		prev[kind] = mustTranslate(t, base, kind)
	}
	all, err := retranslateAllFleet(prev, changed)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range Kinds {
		full := mustTranslate(t, changed, kind)
		if typ := differingType(t, all[kind], full); typ != "" {
			t.Errorf("%v: RetranslateAll differs from Translate in its %s", kind, typ)
		}
		if a, b := versions(mustSnapshot(t, all[kind])), versions(mustSnapshot(t, full)); !maps.Equal(a, b) {
			t.Errorf("%v: RetranslateAll versions %v, Translate %v", kind, a, b)
		}
	}
	for kind, from := range sharesEndpoints {
		if &all[kind].Endpoints[0] != &all[from].Endpoints[0] {
			t.Errorf("%v does not share the ClusterLoadAssignments of %v", kind, from)
		}
	}
	if _, err := retranslateAllFleet(prev, fleet.Fleet{Pools: []fleet.Pool{{Name: "x"}}}); err == nil {
		t.Error("RetranslateAll of an invalid fleet: want error")
	}
}

func TestErrors(t *testing.T) {
	good := func() fleet.Pool {
		return fleet.Pool{
			Name: "p", Settings: fleet.Settings{
				Port: 1000,
				Hash: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}},
			},
			Endpoints: []fleet.Endpoint{{Host: "10.0.0.1", Port: 80}},
		}
	}
	for name, mutate := range map[string]func(p *fleet.Pool){
		"no hash key":          func(p *fleet.Pool) { p.Hash.Keys = nil },
		"bad header name":      func(p *fleet.Pool) { p.Hash.Keys[0].Header = "x-bad\r\nname" },
		"non-prime table":      func(p *fleet.Pool) { p.Hash.TableSize = 65536 },
		"table too big":        func(p *fleet.Pool) { p.Hash.TableSize = 5000017 },
		"max ring below 1024":  func(p *fleet.Pool) { p.Hash.MaxRingSize = 512 },
		"ring above 8M":        func(p *fleet.Pool) { p.Hash.Algorithm = fleet.RingHash; p.Hash.MaxRingSize = 1 << 24 },
		"maglev min above max": func(p *fleet.Pool) { p.Hash.MinRingSize, p.Hash.MaxRingSize = 4096, 2048 },
		"invalid utf-8 name":   func(p *fleet.Pool) { p.Name = "p\xff" },
		"invalid utf-8 key":    func(p *fleet.Pool) { p.Endpoints[0].HashKey = "\xfe" },
		"duplicate address": func(p *fleet.Pool) {
			p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: "10.0.0.1", Port: 80, HashKey: "other"})
		},
		"weights overflow": func(p *fleet.Pool) {
			p.Endpoints[0].Weight = math.MaxUint32
			p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: "10.0.0.2", Port: 80})
		},
		"unknown health":       func(p *fleet.Pool) { p.Endpoints[0].Health = 9 },
		"negative timeout":     func(p *fleet.Pool) { p.RouteTimeout = -time.Second },
		"bad balance factor":   func(p *fleet.Pool) { p.Hash.BalanceFactor = 50 },
		"unknown algorithm":    func(p *fleet.Pool) { p.Hash.Algorithm = "random" },
		"empty endpoint host":  func(p *fleet.Pool) { p.Endpoints[0].Host = "" },
		"port out of range":    func(p *fleet.Pool) { p.Port = 70000 },
		"two sources in a key": func(p *fleet.Pool) { p.Hash.Keys[0].Cookie = "c" },
		"empty hash key":       func(p *fleet.Pool) { p.Hash.Keys[0] = fleet.HashKey{} },
	} {
		t.Run(name, func(t *testing.T) {
			p := good()
			if _, err := translateFleet(fleet.Fleet{Pools: []fleet.Pool{p}}, Envoy); err != nil {
				t.Fatalf("baseline: %v", err)
			}
			mutate(&p)
			for _, kind := range Kinds {
				r, err := translateFleet(fleet.Fleet{Pools: []fleet.Pool{p}}, kind)
				if err == nil {
					t.Fatalf("%v: want error, got %d listeners", kind, len(r.Listeners))
				}
				// fleet.Prepare rejects what no client accepts; the rest
				// fails in translation.
				if !strings.HasPrefix(err.Error(), "translate:") && !strings.HasPrefix(err.Error(), "fleet:") {
					t.Errorf("error not prefixed: %v", err)
				}
			}
			prev := mustTranslate(t, fleet.Fleet{Pools: []fleet.Pool{good()}}, Envoy)
			if _, err := retranslateFleet(prev, fleet.Fleet{Pools: []fleet.Pool{p}}, Envoy); err == nil && name != "bad header name" {
				t.Errorf("Retranslate: want error")
			}
		})
	}
	// A resource-level failure names the pool and the resource.
	p := good()
	p.Hash.Keys[0].Header = "x\nbad"
	_, err := translateFleet(fleet.Fleet{Pools: []fleet.Pool{p}}, Envoy)
	if err == nil || !strings.Contains(err.Error(), `pool "p"`) || !strings.Contains(err.Error(), "route configuration") {
		t.Errorf("want error naming pool and route configuration, got %v", err)
	}
}

// TestGRPCAcceptance re-checks, on the wire form, the rules grpc-go v1.85
// enforces when it parses these resources (xdsresource.unmarshal_*.go and
// xdslbregistry/converter); a violation there is a NACK.
func TestGRPCAcceptance(t *testing.T) {
	for name, f := range allFixtures(t) {
		for _, kind := range []Kind{GRPC, GRPCJS} {
			grpcAcceptance(t, name+"/"+kind.String(), mustTranslate(t, f, kind))
		}
	}
}

func grpcAcceptance(t *testing.T, name string, r *Resources) {
	t.Helper()
	{
		for _, l := range roundTrip(t, r.Listeners) {
			al := l.GetApiListener().GetApiListener()
			hcm := new(hcmv3.HttpConnectionManager)
			if al.GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager" || al.UnmarshalTo(hcm) != nil {
				t.Fatalf("%s: listener %q: api_listener is not an HCM", name, l.Name)
			}
			if hcm.GetRds().GetConfigSource().GetAds() == nil || hcm.GetRds().GetRouteConfigName() != l.Name {
				t.Errorf("%s: listener %q: RDS must be ADS and name the route configuration", name, l.Name)
			}
			fs := hcm.GetHttpFilters()
			if len(fs) == 0 || fs[len(fs)-1].GetName() == "" || !fs[len(fs)-1].GetTypedConfig().MessageIs(&routerv3.Router{}) {
				t.Errorf("%s: listener %q: last HTTP filter must be the router", name, l.Name)
			}
			if hcm.GetXffNumTrustedHops() != 0 || len(hcm.GetOriginalIpDetectionExtensions()) != 0 {
				t.Errorf("%s: listener %q: xff settings set", name, l.Name)
			}
		}
		for _, rc := range roundTrip(t, r.Routes) {
			for _, vh := range rc.GetVirtualHosts() {
				if !slices.Contains(vh.GetDomains(), "*") {
					t.Errorf("%s: %q: virtual host does not match every target", name, rc.Name)
				}
				for _, rt := range vh.GetRoutes() {
					for _, hp := range rt.GetRoute().GetHashPolicy() {
						if !hp.GetTerminal() {
							t.Errorf("%s: %q: non-terminal hash policy", name, rc.Name)
						}
					}
				}
			}
		}
		for _, c := range roundTrip(t, r.Clusters) {
			if c.GetType() != clusterv3.Cluster_EDS || c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
				t.Errorf("%s: cluster %q: must be EDS over ADS", name, c.Name)
			}
			if c.GetMaglevLbConfig() != nil || c.GetLeastRequestLbConfig() != nil {
				t.Errorf("%s: cluster %q: legacy lb config other than ring hash set", name, c.Name)
			}
			if len(c.GetTransportSocketMatches()) != 0 || c.GetTransportSocket() != nil {
				t.Errorf("%s: cluster %q: transport socket set", name, c.Name)
			}
			if pool, ok := strings.CutSuffix(c.Name, fleet.KeylessSuffix); ok {
				// A keyless cluster shares its pool's endpoints and
				// takes the first (only) policy: round robin or least
				// request.
				ps := c.GetLoadBalancingPolicy().GetPolicies()
				tc := ps[0].GetTypedExtensionConfig().GetTypedConfig()
				if len(ps) != 1 || !tc.MessageIs(&roundrobinv3.RoundRobin{}) && !tc.MessageIs(&leastrequestv3.LeastRequest{}) {
					t.Errorf("%s: keyless cluster %q: policies %v", name, c.Name, ps)
				}
				if c.GetEdsClusterConfig().GetServiceName() != pool {
					t.Errorf("%s: keyless cluster %q: service name %q, want %q", name, c.Name, c.GetEdsClusterConfig().GetServiceName(), pool)
				}
				continue
			}
			// A hash cluster is the legacy RING_HASH with XX_HASH (both
			// clients read its sizes; grpc-go NACKs another hash) and no
			// load_balancing_policy, which would take precedence.
			rh := c.GetRingHashLbConfig()
			if c.GetLbPolicy() != clusterv3.Cluster_RING_HASH || rh == nil || c.GetLoadBalancingPolicy() != nil {
				t.Errorf("%s: cluster %q: want legacy ring hash only", name, c.Name)
				continue
			}
			if rh.GetHashFunction() != clusterv3.Cluster_RingHashLbConfig_XX_HASH {
				t.Errorf("%s: cluster %q: hash function %v", name, c.Name, rh.GetHashFunction())
			}
			if minSize, maxSize := rh.GetMinimumRingSize().GetValue(), rh.GetMaximumRingSize().GetValue(); minSize > maxSize || maxSize > ringhash.DefaultCap {
				t.Errorf("%s: cluster %q: ring sizes %d..%d", name, c.Name, minSize, maxSize)
			}
		}
		for _, cla := range roundTrip(t, r.Endpoints) {
			seenLoc := map[string]bool{}
			seenAddr := map[string]bool{}
			for _, lle := range cla.GetEndpoints() {
				loc := lle.GetLocality()
				if loc == nil {
					t.Fatalf("%s: %q: locality without ID", name, cla.ClusterName)
				}
				if lle.GetLoadBalancingWeight().GetValue() == 0 {
					t.Errorf("%s: %q: locality weight 0 (gRPC drops it)", name, cla.ClusterName)
				}
				if lle.GetPriority() != 0 {
					t.Errorf("%s: %q: priority set", name, cla.ClusterName)
				}
				if k := loc.GetRegion() + "\x00" + loc.GetZone() + "\x00" + loc.GetSubZone(); seenLoc[k] {
					t.Errorf("%s: %q: duplicate locality %v", name, cla.ClusterName, loc)
				} else {
					seenLoc[k] = true
				}
				for _, ep := range lle.GetLbEndpoints() {
					sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
					a := fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
					if seenAddr[a] {
						t.Errorf("%s: %q: duplicate address %s", name, cla.ClusterName, a)
					}
					seenAddr[a] = true
					if w := ep.GetLoadBalancingWeight(); w == nil || w.GetValue() == 0 {
						t.Errorf("%s: %q: endpoint weight must be >= 1", name, cla.ClusterName)
					}
					hk, ok := ep.GetMetadata().GetFilterMetadata()["envoy.lb"].AsMap()["hash_key"].(string)
					if !ok || hk == "" {
						t.Errorf("%s: %q: endpoint %s without envoy.lb hash_key", name, cla.ClusterName, a)
					}
				}
			}
		}
	}
}

func roundTrip[T proto.Message](t *testing.T, items []T) []T {
	t.Helper()
	out := make([]T, len(items))
	for i, m := range items {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		n := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(b, n); err != nil {
			t.Fatal(err)
		}
		out[i] = n.(T)
	}
	return out
}

// Only Prepare makes a Model that translates: a zero Model was never
// normalised or validated.
func TestUnpreparedModel(t *testing.T) {
	if _, err := Translate(fleet.Model{}, Envoy); err == nil {
		t.Error("Translate of a zero Model: want error")
	}
	if _, err := RetranslateAll(nil, fleet.Model{}); err == nil {
		t.Error("RetranslateAll of a zero Model: want error")
	}
	m, err := fleet.Prepare(fleet.Fleet{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Translate(m, Envoy); err != nil {
		t.Errorf("Translate of a prepared empty fleet: %v", err)
	}
}

// A pool with entries_per_weight sizes Envoy's ring to its healthy
// weight: the endpoint fast path rebuilds Envoy's clusters too, exactly
// as a full translation, and their version follows the weights.
func TestEntriesPerWeightFastPath(t *testing.T) {
	base := genFleet(3, 10)
	base.Pools[1].Hash = fleet.Hash{Algorithm: fleet.RingHash, EntriesPerWeight: 256, Keys: base.Pools[1].Hash.Keys}
	changed := shuffled(base, rand.New(rand.NewPCG(3, 4)))
	for i := range changed.Pools {
		for j := range changed.Pools[i].Endpoints {
			changed.Pools[i].Endpoints[j].Weight++
		}
	}
	prev := mustTranslate(t, base, Envoy)
	fast, err := retranslateFleet(prev, changed, Envoy)
	if err != nil {
		t.Fatal(err)
	}
	full := mustTranslate(t, changed, Envoy)
	if typ := differingType(t, fast, full); typ != "" {
		t.Fatalf("Retranslate differs from Translate in its %s", typ)
	}
	before, after := versions(mustSnapshot(t, prev)), versions(mustSnapshot(t, fast))
	if before[resource.ClusterType] == after[resource.ClusterType] {
		t.Error("Envoy's clusters kept their version while the ring's healthy weight changed")
	}
	if before[resource.ListenerType] != after[resource.ListenerType] || before[resource.RouteType] != after[resource.RouteType] {
		t.Error("listeners or routes changed with the endpoints")
	}
}

// RetranslateLoad gives every kind what Translate gives it for a fleet
// whose replicas' load moved (bytes and adapters in flight, when they
// were counted, hit rates), shares Envoy's listeners, clusters and
// assignments, and serves every other kind its previous resources.
func TestRetranslateLoad(t *testing.T) {
	for _, name := range []string{"pick", "prefill", "adapters", "chat"} {
		base := loadFleet(t, "testdata/in/"+name+".yaml")
		if name == "prefill" {
			// The prefill pool bounds prompt bytes with its load observed.
			for i := range base.Pools {
				if p := &base.Pools[i]; p.Name == "chat-prefill" {
					p.Hash.BalanceOn, p.Hash.LoadInterval = fleet.BalanceOnPromptBytes, fleet.DefaultLoadInterval
					p.LoadAt = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
				}
			}
		}
		next := base
		next.Pools = slices.Clone(base.Pools)
		for i := range next.Pools {
			p := &next.Pools[i]
			if !p.LoadAt.IsZero() {
				p.LoadAt = p.LoadAt.Add(time.Second)
				// A key went away to its first replica.
				p.Went = map[string]fleet.KeyWent{"0123abcd": {Host: p.Endpoints[0].Address(), At: p.LoadAt.UnixMilli()}}
				// And the keys placed lately: key 0123abcd's bit.
				p.Seen = inflight.SeenSet([]uint16{0x0123})
			}
			p.Endpoints = slices.Clone(p.Endpoints)
			for j := range p.Endpoints {
				e := &p.Endpoints[j]
				e.InFlightBytes += uint64(1000 * (j + 1))
				e.Cached = uint8((j + 3) % 16)
				if p.LoRA != nil {
					e.InFlightAdapters = ""
				}
			}
		}
		prev := map[Kind]*Resources{}
		for _, kind := range Kinds {
			prev[kind] = mustTranslate(t, base, kind)
		}
		m, err := fleet.Prepare(next)
		if err != nil {
			t.Fatal(err)
		}
		moved := map[string]bool{}
		for _, p := range m.Fleet().Pools {
			moved[p.Name] = true
		}
		got, err := RetranslateLoad(prev, m, moved)
		if err != nil {
			t.Fatal(err)
		}
		routesMoved := false
		for _, kind := range Kinds {
			full := mustTranslate(t, next, kind)
			if typ := differingType(t, got[kind], full); typ != "" {
				t.Errorf("%s/%v: RetranslateLoad differs from Translate in its %s", name, kind, typ)
			}
			a, b := versions(mustSnapshot(t, got[kind])), versions(mustSnapshot(t, full))
			if !maps.Equal(a, b) {
				t.Errorf("%s/%v: RetranslateLoad versions %v, Translate %v", name, kind, a, b)
			}
			if kind != Envoy && got[kind] != prev[kind] {
				t.Errorf("%s/%v: not served its previous resources", name, kind)
			}
			if kind == Envoy {
				// The keys placed lately ride in the routes' metadata.
				seen := false
				for _, rc := range full.Routes {
					seen = seen || strings.Contains(prototext.Format(rc), inflight.SeenSet([]uint16{0x0123}))
				}
				if want := name != "chat" && name != "adapters"; seen != want {
					t.Errorf("%s: routes carry the keys placed: %v, want %v", name, seen, want)
				}
				routesMoved = a[resource.RouteType] != versions(mustSnapshot(t, prev[kind]))[resource.RouteType]
				if len(got[kind].Listeners) > 0 && &got[kind].Listeners[0] != &prev[kind].Listeners[0] {
					t.Errorf("%s: Envoy's listeners not shared", name)
				}
			}
		}
		// The fixtures with tables carry the load that moved.
		if want := name != "chat" && name != "adapters"; routesMoved != want {
			t.Errorf("%s: Envoy's routes moved %v, want %v", name, routesMoved, want)
		}
	}
	if _, err := RetranslateLoad(map[Kind]*Resources{}, fleet.Model{}, nil); err == nil {
		t.Error("RetranslateLoad of an unprepared model: want error")
	}
}
