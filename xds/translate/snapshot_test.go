package translate

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvxds/kvxds/fleet"
)

// What the cache sends for an endpoint assignment or a route
// configuration is byte for byte its deterministic encoding, and the
// cache still finds it by name.
func TestPreEncodedResources(t *testing.T) {
	for name, f := range allFixtures(t) {
		for _, kind := range Kinds {
			r := mustTranslate(t, f, kind)
			s := mustSnapshot(t, r)
			checkPreEncoded(t, fmt.Sprintf("%s/%v", name, kind), s.GetResources(resource.EndpointType), r.Endpoints,
				func() *endpointv3.ClusterLoadAssignment { return &endpointv3.ClusterLoadAssignment{} })
			checkPreEncoded(t, fmt.Sprintf("%s/%v", name, kind), s.GetResources(resource.RouteType), r.Routes,
				func() *routev3.RouteConfiguration { return &routev3.RouteConfiguration{} })
		}
	}
}

// checkPreEncoded checks that held, a snapshot's resources of one type,
// holds each of items under its name, sent as its deterministic
// encoding, which decodes to it.
func checkPreEncoded[T proto.Message](t *testing.T, what string, held map[string]types.Resource, items []T, zero func() T) {
	t.Helper()
	if len(held) != len(items) {
		t.Fatalf("%s: %d resources held, want %d", what, len(held), len(items))
	}
	for _, m := range items {
		n := cache.GetResourceName(m)
		h, ok := held[n]
		if !ok {
			t.Fatalf("%s: %s not held under its name", what, n)
		}
		if any(h) == any(m) {
			t.Errorf("%s: %s held decoded: the cache would encode it again for every stream", what, n)
		}
		want, err := marshalOpts.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cache.MarshalResource(h)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %s is sent as %d bytes that differ from its encoding (%d bytes)", what, n, len(got), len(want))
		}
		// Decoding what is sent gives the resource back.
		back := zero()
		if err := proto.Unmarshal(got, back); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(back, m) {
			t.Errorf("%s: %s decodes to a different resource", what, n)
		}
	}
}

// BenchmarkResponseEncoding is the cache's work per stream and response
// for one 100-endpoint assignment: encoding the decoded message, against
// copying the pre-encoded one.
func BenchmarkResponseEncoding(b *testing.B) {
	r := mustTranslate(b, genFleet(1, 100), Envoy)
	s := mustSnapshot(b, r)
	for _, bc := range []struct {
		name string
		m    proto.Message
	}{
		{"decoded", r.Endpoints[0]},
		{"pre-encoded", s.GetResources(resource.EndpointType)[r.Endpoints[0].GetClusterName()]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cache.MarshalResource(bc.m); err != nil {
					b.Fatal(err)
				}
			}
		})
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
