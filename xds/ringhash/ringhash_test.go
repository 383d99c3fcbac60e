package ringhash

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestBuild(t *testing.T) {
	eps := []Endpoint{{"b:1", 2}, {"a:1", 1}, {"c:1", 1}}
	for _, tc := range []struct {
		name             string
		minSize, maxSize uint64
		counts           []int
	}{
		// scale = min(ceil(0.25 × 8) / 0.25, 8) = 8: 4, 2, 2 entries.
		{"exact", 8, 8, []int{4, 2, 2}},
		// scale 7: cumulative targets 1.75 (a), 5.25 (b), 7 (c) in
		// hash-key order give a 2, b 4, c 1.
		{"cumulative", 7, 7, []int{4, 2, 1}},
		// The minimum is rounded up to whole entries of the lightest.
		{"min", 5, 100, []int{4, 2, 2}},
	} {
		r := Build(eps, tc.minSize, tc.maxSize)
		for i, want := range tc.counts {
			if r.Counts[i] != want {
				t.Errorf("%s: %s has %d entries, want %d", tc.name, eps[i].HashKey, r.Counts[i], want)
			}
		}
		if x := BuildExact(eps, tc.minSize, tc.maxSize); !slices.Equal(x.Entries, r.Entries) || !slices.Equal(x.Counts, r.Counts) {
			t.Errorf("%s: exact ring has counts %v, floating-point ring %v", tc.name, x.Counts, r.Counts)
		}
		for i := 1; i < len(r.Entries); i++ {
			if r.Entries[i-1].Hash > r.Entries[i].Hash {
				t.Fatalf("%s: ring not sorted", tc.name)
			}
		}
		sum := 0.0
		for _, s := range r.Shares() {
			sum += s
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("%s: shares sum to %v", tc.name, sum)
		}
	}
}

func TestOwner(t *testing.T) {
	if got := Build(nil, 1, 1).Owner(42); got != -1 {
		t.Errorf("empty ring: owner %d, want -1", got)
	}
	r := Build([]Endpoint{{"a", 1}, {"b", 1}}, 4, 4)
	first, last := r.Entries[0], r.Entries[len(r.Entries)-1]
	for _, tc := range []struct {
		h    uint64
		want int
	}{
		{0, first.Endpoint},
		{first.Hash, first.Endpoint},
		{first.Hash + 1, r.Entries[1].Endpoint},
		{last.Hash, last.Endpoint},
		{last.Hash + 1, first.Endpoint}, // wraps around
		{math.MaxUint64, first.Endpoint},
	} {
		if got := r.Owner(tc.h); got != tc.want {
			t.Errorf("Owner(%d) = %d, want %d", tc.h, got, tc.want)
		}
	}
	if one := Build([]Endpoint{{"a", 1}}, 1, 1); one.Shares()[0] != 1 {
		t.Errorf("one entry: share %v, want 1", one.Shares())
	}
}

func TestExtended(t *testing.T) {
	eps := []Endpoint{{"b:1", 1}, {"a:1", 1}, {"c:1", 2}}
	short := Build(eps, 15, 15) // 4, 4, 7: c, last, is one short
	if short.Counts[2] != 7 || Last(eps) != 2 {
		t.Fatalf("counts %v, last %d", short.Counts, Last(eps))
	}
	full := short.Extended(eps, Last(eps))
	want := Build(eps, 16, 16)
	if !slices.Equal(full.Entries, want.Entries) || !slices.Equal(full.Counts, want.Counts) {
		t.Errorf("extended ring differs from the ring of size 16")
	}
	if len(short.Entries) != 15 {
		t.Error("Extended modified its receiver")
	}
	if Last(nil) != -1 {
		t.Error("Last(nil) != -1")
	}
}

// grpcGoCounts is the number of entries grpc-go (v1.85) gives each of eps,
// all in one locality: the xDS cluster resolver normalises every weight to
// UQ1.31 fixed point, rounding down, and multiplies it by the locality's
// normalised weight, 1.0 here (internal/xds/balancer/cdsbalancer,
// configbuilder.go, gRFC A113); the ring hash divides those by their sum
// in floating point (balancer/ringhash/ring.go, normalizeWeights and
// newRing), endpoints in hash-key order.
func grpcGoCounts(eps []Endpoint, minSize, maxSize uint64) []int {
	var sum uint64
	for _, e := range eps {
		sum += e.Weight
	}
	fixed := make([]uint32, len(eps))
	var fixedSum uint32
	for i, e := range eps {
		fixed[i] = uint32((uint64(uint32(e.Weight<<31/sum)) * (1 << 31)) >> 31)
		fixedSum += fixed[i]
	}
	minW := 1.0
	for i := range eps {
		minW = math.Min(minW, float64(fixed[i])/float64(fixedSum))
	}
	scale := math.Min(math.Ceil(minW*float64(minSize))/minW, float64(maxSize))
	order, _, _ := sorted(eps)
	counts := make([]int, len(eps))
	var cur, target float64
	for _, i := range order {
		target += scale * (float64(fixed[i]) / float64(fixedSum))
		for ; cur < target; cur++ {
			counts[i]++
		}
	}
	return counts
}

// The floating-point rings of both clients are the exact ring, or that
// ring with one more entry for the last endpoint, under kvxds's sizing
// (64 entries per unit of weight, less one); neither is always Build's.
func TestBuildExact(t *testing.T) {
	// Weights 4, 4, 3, 3, 2, 2, 1, 1 in hash-key order: grpc-js's sum of
	// targets overshoots 1,279 and gives h a 64th entry, grpc-go's
	// fixed-point weights do not.
	var eps []Endpoint
	for i, w := range []uint64{4, 4, 3, 3, 2, 2, 1, 1} {
		eps = append(eps, Endpoint{string(rune('a' + i)), w})
	}
	exact, float := BuildExact(eps, 1279, 1279), Build(eps, 1279, 1279)
	if len(exact.Entries) != 1279 || exact.Counts[7] != 63 {
		t.Errorf("exact ring: %d entries, counts %v", len(exact.Entries), exact.Counts)
	}
	if ext := exact.Extended(eps, Last(eps)); !slices.Equal(ext.Entries, float.Entries) {
		t.Errorf("floating-point ring has counts %v, want the extended exact ring's %v", float.Counts, ext.Counts)
	}
	if got := grpcGoCounts(eps, 1279, 1279); !slices.Equal(got, exact.Counts) {
		t.Errorf("grpc-go counts %v, want the exact ring's %v", got, exact.Counts)
	}

	rng := rand.New(rand.NewPCG(3, 3))
	seen := map[string]int{}
	for trial := range 1000 {
		n := 1 + rng.IntN(64)
		eps := make([]Endpoint, n)
		var sum uint64
		for i := range eps {
			eps[i] = Endpoint{fmt.Sprintf("10.0.%d.%d:8000", rng.IntN(256), i), 1 + rng.Uint64N(4)}
			sum += eps[i].Weight
		}
		size := 64*sum - 1
		exact := counts(eps, exactTargets, size)
		last := Last(eps)
		within := func(client string, got []int) {
			for i, c := range got {
				if d := c - exact[i]; d != 0 && (d != 1 || i != last) {
					t.Fatalf("trial %d: %s gives %s %d entries, the exact ring %d (last endpoint %s)", trial, client, eps[i].HashKey, c, exact[i], eps[last].HashKey)
				}
			}
			seen[fmt.Sprint(client, " ", got[last]-exact[last])]++
		}
		within("grpc-js (Build)", counts(eps, floatTargets, size))
		within("grpc-go", grpcGoCounts(eps, size, size))
	}
	t.Logf("last endpoint's extra entries: %v", seen)
}

// counts is how many entries each endpoint gets from targets, without
// building the ring.
func counts(eps []Endpoint, targets func([]Endpoint, uint64, uint64) ([]int, []uint64), size uint64) []int {
	order, cum := targets(eps, size, size)
	out := make([]int, len(eps))
	var prev uint64
	for k, i := range order {
		out[i] = int(cum[k] - prev)
		prev = cum[k]
	}
	return out
}
