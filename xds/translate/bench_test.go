package translate

import (
	"testing"

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
