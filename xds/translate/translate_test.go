package translate

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvxds/kvxds/xds/fleet"
	"github.com/kvxds/kvxds/xds/ringhash"
)

// genFleet is a synthetic fleet: pools × eps endpoints over three zones,
// with varied weights and health.
func genFleet(pools, eps int) fleet.Fleet {
	var f fleet.Fleet
	for i := range pools {
		p := fleet.Pool{
			Name:         fmt.Sprintf("pool-%02d", i),
			Port:         uint32(10000 + i),
			RouteTimeout: time.Duration(i) * time.Second,
			Hash: fleet.Hash{
				Keys: []fleet.HashKey{{Header: "x-session-id"}, {Cookie: "sid"}, {QueryParameter: "session"}},
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

// TestKinds: Envoy and gRPC clients share routes and endpoints but not
// listeners or hash clusters; grpc-js has no keyless cluster and unit
// locality weights.
func TestKinds(t *testing.T) {
	f := genFleet(3, 10)
	e, g, js := mustTranslate(t, f, Envoy), mustTranslate(t, f, GRPC), mustTranslate(t, f, GRPCJS)
	if Version(e.Routes) != Version(g.Routes) || Version(e.Endpoints) != Version(g.Endpoints) {
		t.Error("routes or endpoints differ between Envoy and gRPC")
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
	for _, cla := range js.Endpoints {
		for _, l := range cla.GetEndpoints() {
			if l.GetLoadBalancingWeight().GetValue() != 1 {
				t.Errorf("grpc-js %q: locality weight %d, want 1", cla.ClusterName, l.GetLoadBalancingWeight().GetValue())
			}
		}
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

// TestMarshalShortcut: Snapshot marshals the CLAs it built without
// sorting map keys; the bytes must be those of a deterministic marshal,
// and a CLA with larger maps must not take the shortcut.
func TestMarshalShortcut(t *testing.T) {
	for name, f := range allFixtures(t) {
		for _, cla := range mustTranslate(t, f, Envoy).Endpoints {
			if !singleEntryMaps(cla) {
				t.Fatalf("%s: %q: shortcut not taken", name, cla.ClusterName)
			}
			det, err := proto.MarshalOptions{Deterministic: true}.Marshal(cla)
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				b, err := proto.Marshal(cla)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, det) {
					t.Fatalf("%s: %q: bytes differ", name, cla.ClusterName)
				}
			}
		}
	}
	cla := mustTranslate(t, genFleet(1, 2), Envoy).Endpoints[0]
	cla = proto.Clone(cla).(*endpointv3.ClusterLoadAssignment)
	fm := cla.Endpoints[0].LbEndpoints[0].Metadata.FilterMetadata
	fm["envoy.lb"].Fields["other"] = structpb.NewStringValue("x")
	if singleEntryMaps(cla) {
		t.Error("two-entry struct: shortcut taken")
	}
	delete(fm["envoy.lb"].Fields, "other")
	fm["another"] = &structpb.Struct{}
	if singleEntryMaps(cla) {
		t.Error("two-entry filter_metadata: shortcut taken")
	}
	if singleEntryMaps(&clusterv3.Cluster{}) {
		t.Error("cluster: shortcut taken")
	}
}

func TestVersion(t *testing.T) {
	if got := Version[*clusterv3.Cluster](nil); len(got) != 16 {
		t.Errorf("Version(nil) = %q, want 16 hex digits", got)
	}
	a := []*routev3.RouteConfiguration{{Name: "a"}, {Name: "b"}}
	b := []*routev3.RouteConfiguration{{Name: "b"}, {Name: "a"}}
	c := []*routev3.RouteConfiguration{{Name: "ab"}}
	if Version(a) == Version(b) || Version(a) == Version(c) {
		t.Error("Version must depend on order and on item boundaries")
	}
	if Version(a) != Version([]*routev3.RouteConfiguration{{Name: "a"}, {Name: "b"}}) {
		t.Error("Version not deterministic")
	}
	// Invalid UTF-8 cannot be marshalled: Version must still not panic.
	_ = Version([]*routev3.RouteConfiguration{{Name: "\xff"}})
}

func versions(s *cache.Snapshot) map[string]string {
	out := map[string]string{}
	for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType} {
		out[typ] = s.GetVersion(typ)
	}
	return out
}

func TestSnapshotVersions(t *testing.T) {
	base := genFleet(3, 20)
	weights := shuffled(base, rand.New(rand.NewPCG(3, 4)))
	weights.Pools[1].Endpoints[3].Weight += 5
	health := shuffled(base, rand.New(rand.NewPCG(5, 6)))
	health.Pools[0].Endpoints[0].Health = (health.Pools[0].Endpoints[0].Health + 1) % 4
	more := genFleet(4, 20)
	// The same total weight on the ring: gRPC rings keep their size.
	shift := shuffled(base, rand.New(rand.NewPCG(7, 8)))
	var healthy []*fleet.Endpoint
	for i := range shift.Pools[1].Endpoints {
		if e := &shift.Pools[1].Endpoints[i]; e.Health == fleet.Healthy && e.Weight > 1 {
			healthy = append(healthy, e)
		}
	}
	if len(healthy) < 2 {
		t.Fatal("fixture: fewer than two healthy endpoints of weight > 1")
	}
	healthy[0].Weight++
	healthy[1].Weight--

	for _, kind := range Kinds {
		v0 := versions(mustSnapshot(t, mustTranslate(t, base, kind)))
		for typ, v := range v0 {
			if len(v) != 16 {
				t.Errorf("%s version %q: want 16 hex digits", typ, v)
			}
		}
		// gRPC clients' ring size follows the healthy weight.
		eds := func(f fleet.Fleet) []string {
			out := []string{resource.EndpointType}
			if kind.proxyless() && !slices.Equal(ringSizes(base), ringSizes(f)) {
				out = append(out, resource.ClusterType)
			}
			return out
		}
		for name, tc := range map[string]struct {
			f       fleet.Fleet
			changed []string
		}{
			"weight": {weights, eds(weights)},
			"health": {health, eds(health)},
			"shift":  {shift, []string{resource.EndpointType}},
			"pool":   {more, []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}},
		} {
			v1 := versions(mustSnapshot(t, mustTranslate(t, tc.f, kind)))
			for typ := range v0 {
				if changed := v0[typ] != v1[typ]; changed != slices.Contains(tc.changed, typ) {
					t.Errorf("%v %s change: %s version changed=%v", kind, name, typ, changed)
				}
			}
		}
	}
}

// differingType names the first resource type whose deterministic bytes
// differ between a and b, or returns "".
func differingType(t *testing.T, a, b *Resources) string {
	t.Helper()
	for _, c := range []struct {
		name string
		a, b [][]byte
	}{
		{"listeners", marshalAll(t, a.Listeners), marshalAll(t, b.Listeners)},
		{"routes", marshalAll(t, a.Routes), marshalAll(t, b.Routes)},
		{"clusters", marshalAll(t, a.Clusters), marshalAll(t, b.Clusters)},
		{"endpoints", marshalAll(t, a.Endpoints), marshalAll(t, b.Endpoints)},
	} {
		if !slices.EqualFunc(c.a, c.b, bytes.Equal) {
			return c.name
		}
	}
	return ""
}

// ringSizes is the gRPC ring size of each pool of f, by pool name.
func ringSizes(f fleet.Fleet) []uint64 {
	n := f.Normalize()
	out := make([]uint64, len(n.Pools))
	for i := range n.Pools {
		out[i] = fleet.GRPCRingSize(fleet.RingWeight(n.Pools[i].Endpoints), n.Pools[i].Hash.GRPCRingCap)
	}
	return out
}

func TestSnapshotContents(t *testing.T) {
	f := genFleet(3, 5)
	for _, kind := range Kinds {
		r := mustTranslate(t, f, kind)
		s := mustSnapshot(t, r)
		// Each hash pool has a keyless cluster, except for grpc-js.
		clusters := 6
		if kind == GRPCJS {
			clusters = 3
		}
		for typ, n := range map[string]int{resource.ListenerType: 3, resource.RouteType: 3, resource.ClusterType: clusters, resource.EndpointType: 3} {
			if got := len(s.GetResources(typ)); got != n {
				t.Errorf("%v: %d %s, want %d", kind, got, typ, n)
			}
			if got := len(s.GetVersionMap(typ)); got != n {
				t.Errorf("%v: version map of %s has %d entries, want %d", kind, typ, got, n)
			}
		}
		if _, ok := s.GetResources(resource.EndpointType)["pool-01"]; !ok {
			t.Errorf("%v: endpoints not indexed by cluster name", kind)
		}
		// The version map must be what go-control-plane computes itself.
		ref := &cache.Snapshot{Resources: s.Resources}
		if err := ref.ConstructVersionMap(); err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(s.VersionMap, ref.VersionMap, maps.Equal) {
			t.Errorf("%v: version map differs from ConstructVersionMap's", kind)
		}
		// Per-type versions are Version of the items.
		for typ, v := range map[string]string{
			resource.ListenerType: Version(r.Listeners), resource.RouteType: Version(r.Routes),
			resource.ClusterType: Version(r.Clusters), resource.EndpointType: Version(r.Endpoints),
		} {
			if s.GetVersion(typ) != v {
				t.Errorf("%v: %s version %s, want Version(items) = %s", kind, typ, s.GetVersion(typ), v)
			}
		}
		if kind == Envoy {
			// go-control-plane's own check follows Envoy listeners.
			if err := s.Consistent(); err != nil {
				t.Errorf("envoy snapshot not consistent: %v", err)
			}
		}
	}
}

func TestSnapshotReferences(t *testing.T) {
	f := genFleet(2, 3)
	for _, kind := range Kinds {
		r := mustTranslate(t, f, kind)
		for name, broken := range map[string]*Resources{
			"missing endpoints": {Listeners: r.Listeners, Routes: r.Routes, Clusters: r.Clusters, Endpoints: r.Endpoints[:1]},
			"unknown endpoints": {Listeners: r.Listeners, Routes: r.Routes, Clusters: r.Clusters, Endpoints: mustTranslate(t, genFleet(3, 3), kind).Endpoints},
			"missing cluster":   {Listeners: r.Listeners, Routes: r.Routes, Clusters: r.Clusters[1:], Endpoints: r.Endpoints[1:]},
			"missing route":     {Listeners: r.Listeners, Routes: r.Routes[:1], Clusters: r.Clusters, Endpoints: r.Endpoints},
			"duplicate cluster": {Listeners: r.Listeners, Routes: r.Routes, Clusters: append(slices.Clone(r.Clusters), r.Clusters[0]), Endpoints: r.Endpoints},
		} {
			if _, err := broken.Snapshot(); err == nil {
				t.Errorf("%v %s: want error", kind, name)
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
	// Envoy and gRPC share one set of ClusterLoadAssignments.
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
	if &all[Envoy].Endpoints[0] != &all[GRPC].Endpoints[0] {
		t.Error("Envoy and gRPC do not share their ClusterLoadAssignments")
	}
	if _, err := retranslateAllFleet(prev, fleet.Fleet{Pools: []fleet.Pool{{Name: "x"}}}); err == nil {
		t.Error("RetranslateAll of an invalid fleet: want error")
	}
}

func TestErrors(t *testing.T) {
	good := func() fleet.Pool {
		return fleet.Pool{
			Name: "p", Port: 1000,
			Hash:      fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}},
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

// TestWeightShares checks that Envoy and gRPC give every endpoint the same
// share of the hash space. Envoy's Maglev and ring hash (no
// locality_weighted_lb_config) use weight / total over the hosts.
// grpc-go v1.85 (gRFC A113, cdsbalancer/configbuilder.go) uses
// (weight / locality's endpoint total) × (locality weight / locality total).
func TestWeightShares(t *testing.T) {
	for name, f := range allFixtures(t) {
		r := mustTranslate(t, f, GRPC)
		for _, cla := range r.Endpoints {
			var total, locTotal float64
			for _, lle := range cla.GetEndpoints() {
				locTotal += float64(lle.GetLoadBalancingWeight().GetValue())
				for _, ep := range lle.GetLbEndpoints() {
					total += float64(ep.GetLoadBalancingWeight().GetValue())
				}
			}
			for _, lle := range cla.GetEndpoints() {
				var sum float64
				for _, ep := range lle.GetLbEndpoints() {
					sum += float64(ep.GetLoadBalancingWeight().GetValue())
				}
				for _, ep := range lle.GetLbEndpoints() {
					w := float64(ep.GetLoadBalancingWeight().GetValue())
					envoy := w / total
					grpc := (w / sum) * (float64(lle.GetLoadBalancingWeight().GetValue()) / locTotal)
					if math.Abs(envoy-grpc) > 1e-12 {
						t.Errorf("%s: %q: endpoint share Envoy %v, gRPC %v", name, cla.ClusterName, envoy, grpc)
					}
				}
			}
		}
	}
}

func TestManyLocalities(t *testing.T) {
	f := genFleet(1, 200)
	for j := range f.Pools[0].Endpoints {
		f.Pools[0].Endpoints[j].Locality.SubZone = fmt.Sprintf("rack-%02d", j%40)
	}
	cla := mustTranslate(t, f, GRPC).Endpoints[0]
	if len(cla.GetEndpoints()) != 3*40/gcd(3, 40) {
		t.Fatalf("got %d localities", len(cla.GetEndpoints()))
	}
	n := 0
	for i, lle := range cla.GetEndpoints() {
		n += len(lle.GetLbEndpoints())
		key := func(l *corev3.Locality) string { return l.GetRegion() + "\x00" + l.GetZone() + "\x00" + l.GetSubZone() }
		if i > 0 && key(lle.GetLocality()) <= key(cla.GetEndpoints()[i-1].GetLocality()) {
			t.Errorf("localities not sorted")
		}
		for _, ep := range lle.GetLbEndpoints() {
			hk := ep.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue()
			var j int
			fmt.Sscanf(hk, "pool-00-%d", &j)
			if want := fmt.Sprintf("rack-%02d", j%40); lle.GetLocality().GetSubZone() != want {
				t.Errorf("%s in %s, want %s", hk, lle.GetLocality().GetSubZone(), want)
			}
		}
	}
	if n != 200 {
		t.Errorf("got %d endpoints", n)
	}
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func TestEndpointDetails(t *testing.T) {
	f := loadFleet(t, "testdata/in/ringhash.yaml")
	r := mustTranslate(t, f, Envoy)
	cla := r.Endpoints[0]
	want := map[string]corev3.HealthStatus{
		"embed-0": corev3.HealthStatus_HEALTHY, "embed-1": corev3.HealthStatus_DRAINING,
		"embed-2": corev3.HealthStatus_DEGRADED, "[fd00::12]:8000": corev3.HealthStatus_UNHEALTHY,
	}
	got := map[string]corev3.HealthStatus{}
	for _, lle := range cla.GetEndpoints() {
		for _, ep := range lle.GetLbEndpoints() {
			got[ep.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue()] = ep.GetHealthStatus()
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("health by hash key = %v, want %v", got, want)
	}
	if len(cla.GetEndpoints()) != 2 {
		t.Errorf("want 2 localities, got %d", len(cla.GetEndpoints()))
	}
	empty := mustTranslate(t, loadFleet(t, "testdata/in/empty.yaml"), GRPC).Endpoints
	if len(empty) != 1 || empty[0].GetClusterName() != "empty" || len(empty[0].GetEndpoints()) != 0 {
		t.Errorf("empty pool: want a CLA without endpoints, got %v", empty)
	}
}

// TestKeylessRoutes checks the route table of a hash pool: one route per
// key source to the hash cluster, in chain order, then the keyless route;
// and that the cookie matcher (RE2, full match, as in Envoy and gRPC)
// finds the cookie and nothing else.
func TestKeylessRoutes(t *testing.T) {
	f := fleet.Fleet{Pools: []fleet.Pool{{
		Name: "web", Port: 10000,
		Hash: fleet.Hash{Keys: []fleet.HashKey{{Header: "X-Session-ID"}, {Cookie: "s.id"}, {QueryParameter: "session"}}},
	}}}
	r := mustTranslate(t, f, Envoy)
	routes := r.Routes[0].GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 4 {
		t.Fatalf("%d routes, want 4", len(routes))
	}
	for i, want := range []string{"web", "web", "web", "web/keyless"} {
		if got := routes[i].GetRoute().GetCluster(); got != want {
			t.Errorf("route %d goes to %q, want %q", i, got, want)
		}
	}
	if h := routes[0].GetMatch().GetHeaders(); len(h) != 1 || h[0].GetName() != "x-session-id" || !h[0].GetPresentMatch() {
		t.Errorf("route 0 matches %v, want x-session-id present", h)
	}
	if q := routes[2].GetMatch().GetQueryParameters(); len(q) != 1 || q[0].GetName() != "session" || !q[0].GetPresentMatch() {
		t.Errorf("route 2 matches %v, want query parameter session present", q)
	}
	last := routes[3]
	if len(last.GetMatch().GetHeaders()) != 0 || len(last.GetMatch().GetQueryParameters()) != 0 || len(last.GetRoute().GetHashPolicy()) != 0 {
		t.Errorf("keyless route must match everything and not hash: %v", last)
	}
	h := routes[1].GetMatch().GetHeaders()
	if len(h) != 1 || h[0].GetName() != "cookie" {
		t.Fatalf("route 1 matches %v, want the cookie header", h)
	}
	re := regexp.MustCompile(`^(?:` + h[0].GetStringMatch().GetSafeRegex().GetRegex() + `)$`)
	for cookie, want := range map[string]bool{
		"s.id=1":          true,
		"a=1; s.id=2":     true,
		"a=1;s.id=2; b=3": true,
		"a=1, s.id=2":     true,
		"s.id=":           true,
		"xs.id=1":         false,
		"a=s.id=1":        false,
		"sxid=1":          false, // the dot is literal
		"a=1; b=2":        false,
		"":                false,
	} {
		if got := re.MatchString(cookie); got != want {
			t.Errorf("cookie %q: matched %v, want %v", cookie, got, want)
		}
	}
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
