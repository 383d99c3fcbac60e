package translate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/kvxds/kvxds/fleet"
)

// benchFleets returns the benchmark fleet (10 pools × 100 endpoints) and
// the same fleet with every endpoint weight changed.
func benchFleets() (fleet.Fleet, fleet.Fleet) {
	a, b := genFleet(10, 100), genFleet(10, 100)
	for i := range b.Pools {
		for j := range b.Pools[i].Endpoints {
			b.Pools[i].Endpoints[j].Weight += 1 + uint32(j%3)
		}
	}
	return a, b
}

// BenchmarkFullRebuild: Translate + Snapshot for every kind.
func BenchmarkFullRebuild(b *testing.B) {
	f, _ := benchFleets()
	b.ReportAllocs()
	for b.Loop() {
		for _, kind := range Kinds {
			r, err := translateFleet(f, kind)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := r.Snapshot(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkWeightsOnly: rebuild only the endpoints of a weight change and
// a new snapshot reusing the previous listeners, routes and clusters, for
// Envoy.
func BenchmarkWeightsOnly(b *testing.B) {
	f0, f1 := benchFleets()
	prev, err := translateFleet(f0, Envoy)
	if err != nil {
		b.Fatal(err)
	}
	fleets := [2]fleet.Fleet{f0, f1}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r, err := retranslateFleet(prev, fleets[i%2], Envoy)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Snapshot(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEndpointChangeAllKinds: a weight change for every kind,
// as the server pushes it, snapshots included.
func BenchmarkEndpointChangeAllKinds(b *testing.B) {
	f0, f1 := benchFleets()
	prev := map[Kind]*Resources{}
	for _, kind := range Kinds {
		r, err := translateFleet(f0, kind)
		if err != nil {
			b.Fatal(err)
		}
		prev[kind] = r
	}
	fleets := [2]fleet.Fleet{f0, f1}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		all, err := retranslateAllFleet(prev, fleets[i%2])
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range all {
			if _, err := r.Snapshot(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAdapterPickRoutes: the route configuration of a pool whose
// Envoys pick replicas on prompt bytes with its load observed (eight
// adapters in flight on each replica), carrying every placed adapter's
// entry, as a load push rebuilds it;
// route-bytes is its size on the wire, which every Envoy of the pool
// receives at most once per load interval.
func BenchmarkAdapterPickRoutes(b *testing.B) {
	for _, sz := range []struct{ replicas, adapters int }{{8, 89}, {100, 256}} {
		b.Run(fmt.Sprintf("%d_replicas_%d_adapters", sz.replicas, sz.adapters), func(b *testing.B) {
			var ads []fleet.Adapter
			for i := range sz.adapters {
				ads = append(ads, fleet.Adapter{Name: fmt.Sprintf("adapter-%d", i), Replicas: 1 + i%3, Share: 1 / float64(i+1)})
			}
			f := adapterFleet(sz.replicas, ads...)
			p := &f.Pools[0]
			p.LoRA.MaxLoRA, p.LoRA.Max = 64, sz.adapters
			p.Hash.BalanceFactor, p.Hash.BalanceOn, p.Hash.LoadInterval = 200, fleet.BalanceOnPromptBytes, fleet.DefaultLoadInterval
			p.LoadAt = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
			for i := range p.Endpoints {
				p.Endpoints[i].InFlightBytes = uint64(123_456 * (i + 1))
				// Eight adapters in flight on each replica.
				var names []string
				for k := range 8 {
					names = append(names, fmt.Sprintf("adapter-%d", (i+k*7)%sz.adapters))
				}
				slices.Sort(names)
				p.Endpoints[i].InFlightAdapters = strings.Join(names, " ")
			}
			m, err := fleet.Prepare(f)
			if err != nil {
				b.Fatal(err)
			}
			pp, pl := m.Fleet().Pools[0], m.Plan(p.Name)
			var size int
			b.ReportAllocs()
			for b.Loop() {
				rc, err := buildRoute(&pp, &pl, Envoy)
				if err != nil {
					b.Fatal(err)
				}
				size = proto.Size(rc)
			}
			b.ReportMetric(float64(size), "route-bytes")
		})
	}
}

// BenchmarkPickRouteResponse is the cache's work per stream for the route
// configuration of a pool whose Envoys pick replicas on prompt bytes with
// its load observed, as every load push sends it to every Envoy of the
// pool: encoding the decoded message, against copying the pre-encoded
// one. route-bytes is its size on the wire.
func BenchmarkPickRouteResponse(b *testing.B) {
	for _, n := range []int{100, 1000} {
		f := genFleet(1, n)
		p := &f.Pools[0]
		p.Hash.BalanceFactor, p.Hash.BalanceOn, p.Hash.LoadInterval = 150, fleet.BalanceOnPromptBytes, fleet.DefaultLoadInterval
		p.LoadAt = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
		for i := range p.Endpoints {
			p.Endpoints[i].InFlightBytes = uint64(123_456 * (i + 1))
			p.Endpoints[i].Cached = uint8(i % 16)
		}
		r := mustTranslate(b, f, Envoy)
		s := mustSnapshot(b, r)
		name := r.Routes[0].GetName()
		for _, bc := range []struct {
			name string
			m    proto.Message
		}{
			{"decoded", r.Routes[0]},
			{"held", s.GetResources(resource.RouteType)[name]},
		} {
			b.Run(fmt.Sprintf("%d/%s", n, bc.name), func(b *testing.B) {
				b.ReportAllocs()
				var size int
				for b.Loop() {
					out, err := cache.MarshalResource(bc.m)
					if err != nil {
						b.Fatal(err)
					}
					size = len(out)
				}
				b.ReportMetric(float64(size), "route-bytes")
			})
		}
	}
}
