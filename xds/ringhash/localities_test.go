package ringhash

import (
	"fmt"
	"slices"
	"testing"
)

// zoned is a pool of replicas split over zones of the given sizes, with
// weights 1..4 in turn and hash keys that do not follow the zones.
func zoned(sizes ...int) [][]Endpoint {
	var zones [][]Endpoint
	n := 0
	for _, s := range sizes {
		var z []Endpoint
		for range s {
			z = append(z, Endpoint{fmt.Sprintf("10.0.%d.%d:8000", (n*7)%5, n), uint64(1 + n%4)})
			n++
		}
		zones = append(zones, z)
	}
	return zones
}

// size is kvxds's ring size for a total weight: 64 entries per unit.
func size(eps []Endpoint) uint64 {
	var w uint64
	for _, e := range eps {
		w += e.Weight
	}
	return 64*w - 1
}

func sameRing(a, b *Ring) bool { return slices.Equal(a.Entries, b.Entries) }

// TestEveryClientBuildsTheSameRing: with the whole pool in one locality,
// every client's arithmetic gives weights proportional to the endpoints'
// own, so every client builds the ring of the endpoints' weights (or its
// extension of the last endpoint, as rounding may), whatever the zones.
func TestEveryClientBuildsTheSameRing(t *testing.T) {
	for _, sizes := range [][]int{{3, 1}, {1, 3}, {2, 1, 1}, {5, 2}, {1, 6, 1}, {7, 1}} {
		zones := zoned(sizes...)
		all := slices.Concat(zones...)
		slices.SortFunc(all, func(a, b Endpoint) int { return cmpKey(a, b) })
		n := size(all)
		want := BuildExact(all, n, n)
		ext := want.Extended(all, Last(all))
		one := []Locality{{Weight: 1, Endpoints: all}}
		for _, c := range Clients {
			eps := Weigh(c.Arithmetic, one)
			got := Build(eps, n, n)
			if !sameRing(got, want) && !sameRing(got, ext) {
				t.Errorf("zones %v: %s builds counts %v, want %v", sizes, c.Name, got.Counts, want.Counts)
			}
		}
	}
}

// TestZonesBySum: the locality weights kvxds served before (each zone the
// sum of its endpoints' weights) mean the same to grpc-go under gRFC A113
// only; a client that multiplies gives the endpoints of a heavy zone the
// square of their share.
func TestZonesBySum(t *testing.T) {
	zones := zoned(3, 1)
	for i := range zones[0] {
		zones[0][i].Weight = 1
	}
	zones[1][0].Weight = 1
	var locs []Locality
	for _, z := range zones {
		var s uint64
		for _, e := range z {
			s += e.Weight
		}
		locs = append(locs, Locality{Weight: s, Endpoints: z})
	}
	lone := zones[1][0].HashKey
	for _, tc := range []struct {
		a    Arithmetic
		want float64 // the lone replica's share of the weight
	}{{Normalised, 0.25}, {Product, 0.1}} {
		eps := Weigh(tc.a, locs)
		var sum, mine float64
		for _, e := range eps {
			sum += float64(e.Weight)
			if e.HashKey == lone {
				mine = float64(e.Weight)
			}
		}
		if got := mine / sum; got < tc.want-1e-6 || got > tc.want+1e-6 {
			t.Errorf("arithmetic %d: the lone replica weighs %.4f of the ring, want %.4f", tc.a, got, tc.want)
		}
		n := uint64(64*4 - 1)
		r := Build(eps, n, n)
		t.Logf("arithmetic %d: the lone replica holds %.3f of the hash space", tc.a, r.Shares()[slices.IndexFunc(eps, func(e Endpoint) bool { return e.HashKey == lone })])
	}
}

// TestWeighNormalised follows C-core's test of gRFC A113
// (cds_lb_test.cc, PriorityEndpointIteratorTest) in UQ1.31: two
// localities of weight 10, one with two endpoints of weight 100, the
// other with one.
func TestWeighNormalised(t *testing.T) {
	locs := []Locality{
		{Weight: 10, Endpoints: []Endpoint{{"a", 100}, {"b", 100}}},
		{Weight: 10, Endpoints: []Endpoint{{"c", 100}}},
	}
	got := Weigh(Normalised, locs)
	want := []Endpoint{{"a", 536870912}, {"b", 536870912}, {"c", 1073741824}}
	if !slices.Equal(got, want) {
		t.Errorf("Normalised: %v, want %v", got, want)
	}
	if got := Weigh(Product, locs[1:]); got[0].Weight != 1000 {
		t.Errorf("Product: %v, want weight 1000", got)
	}
	healthy := []Locality{{Weight: 3, Endpoints: []Endpoint{{"a", 1}, {"b", 2}}, Healthy: []bool{true, false}}}
	if got := Weigh(Normalised, healthy); len(got) != 1 || got[0].Weight != 1<<31/3 {
		t.Errorf("an unhealthy endpoint still counts in its locality's total: %v", got)
	}
}

func cmpKey(a, b Endpoint) int {
	switch {
	case a.HashKey < b.HashKey:
		return -1
	case a.HashKey > b.HashKey:
		return 1
	}
	return 0
}
