package fleet

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvxds/kvxds/xds/ringhash"
)

func TestGRPCRingSize(t *testing.T) {
	for _, tc := range []struct{ weight, ringCap, want uint64 }{
		{0, 0, 0},
		{1, 0, 63},
		{4, 0, 255},
		{64, 0, 4095},                  // 64 replicas of weight 1: the cap
		{65, 0, 63*65 - 1},             // fewer entries per weight beyond it
		{4096, 0, 4095},                // one entry per unit of weight
		{4097, 0, 4096},                // still one, the last endpoint one short
		{4098, 0, ringhash.DefaultCap}, // proportional
		{1 << 20, 0, ringhash.DefaultCap},
		{4, 4096, 255},
		{4, 16384, 1023}, // a raised cap: 256 entries per unit
		{64, 16384, 16383},
		{65, 16384, 252*65 - 1},
		{1, 64, 1}, // one entry per unit, and never an empty ring
		{100, 64, 64},
	} {
		if got := GRPCRingSize(tc.weight, tc.ringCap); got != tc.want {
			t.Errorf("GRPCRingSize(%d, %d) = %d, want %d", tc.weight, tc.ringCap, got, tc.want)
		}
	}
}

func TestGroupEntriesPerWeight(t *testing.T) {
	for _, tc := range []struct {
		replicas     int
		memberWeight uint32
		ringCap      uint64
		want         uint64
	}{
		{2, 4, 0, 512},  // the cap over 2 × 4 units
		{2, 0, 0, 2048}, // weight 0 counts as 1
		{3, 4, 0, 341},  // rounded down: never over the cap
		{16, 4, 0, 64},  // the pool's entries per unit
		{100, 4, 0, 64}, // never fewer
		{2, 4, 16384, 2048},
		{1, 1, 0, 4097}, // RingSize keeps it within the cap
	} {
		got := GroupEntriesPerWeight(tc.replicas, tc.memberWeight, tc.ringCap)
		if got != tc.want {
			t.Errorf("GroupEntriesPerWeight(%d, %d, %d) = %d, want %d", tc.replicas, tc.memberWeight, tc.ringCap, got, tc.want)
		}
		// At full weight the group's ring fits the cap; entries per unit
		// stay the same at any lower total weight.
		ringCap := cmp.Or(tc.ringCap, ringhash.DefaultCap)
		full := uint64(tc.replicas) * uint64(max(tc.memberWeight, 1))
		if size := RingSize(full, got, tc.ringCap); size > ringCap {
			t.Errorf("%+v: a full group's ring is %d entries, over the cap %d", tc, size, ringCap)
		}
		for w := uint64(1); w <= full && w*got <= ringCap+1; w++ {
			if size := RingSize(w, got, tc.ringCap); size != w*got-1 {
				t.Errorf("%+v: total weight %d: ring %d, want %d", tc, w, size, w*got-1)
			}
		}
	}
}

// A group of two members of equal weight splits a tenant with no key
// nearly evenly on its finer ring, where the pool's 64 entries per unit
// leave several percent between them.
func TestGroupRingSplit(t *testing.T) {
	var devPool, devGroup float64
	const n = 200
	for i := range n {
		eps := []ringhash.Endpoint{{HashKey: fmt.Sprintf("a-%d", i), Weight: 3}, {HashKey: fmt.Sprintf("b-%d", i), Weight: 3}}
		for _, c := range []struct {
			per uint64
			dev *float64
		}{{EntriesPerWeight(0), &devPool}, {GroupEntriesPerWeight(2, 4, 0), &devGroup}} {
			size := RingSize(6, c.per, 0)
			*c.dev += math.Abs(ringhash.BuildExact(eps, size, size).Shares()[0]-0.5) / n
		}
	}
	t.Logf("mean distance from an even split: pool sizing %.4f, group sizing %.4f", devPool, devGroup)
	if devGroup > 0.01 || devGroup > devPool/2 {
		t.Errorf("group sizing splits %.4f off even on average (pool sizing %.4f)", devGroup, devPool)
	}
}

// ringOf is the ring gRPC clients build for eps under kvxds's sizing.
func ringOf(eps []ringhash.Endpoint) *ringhash.Ring {
	return ringWithCap(eps, 0)
}

func ringWithCap(eps []ringhash.Endpoint, ringCap uint64) *ringhash.Ring {
	size := GRPCRingSize(totalWeight(eps), ringCap)
	return ringhash.Build(eps, size, size)
}

func replicas(rng *rand.Rand, n int, maxWeight uint64) []ringhash.Endpoint {
	out := make([]ringhash.Endpoint, n)
	for i := range out {
		out[i] = ringhash.Endpoint{HashKey: fmt.Sprintf("10.%d.%d.%d:8000", rng.IntN(256), i/250, i%250+1), Weight: 1 + rng.Uint64N(maxWeight)}
	}
	return out
}

// Every endpoint gets exactly RingEntriesPerWeight entries per unit of
// weight, except the last on the ring, which gets one less.
func TestGRPCRingEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for n := 1; n <= 64; n++ {
		eps := replicas(rng, n, 1+uint64(n%4))
		r := ringOf(eps)
		short := 0
		for i, e := range eps {
			want := int(e.Weight * EntriesPerWeight(0))
			if got := r.Counts[i]; got == want-1 {
				short++
			} else if got != want && n*4 <= 64 {
				t.Errorf("n=%d: %s weight %d: %d entries, want %d", n, e.HashKey, e.Weight, got, want)
			}
		}
		if short > 1 {
			t.Errorf("n=%d: %d endpoints one entry short, want at most 1", n, short)
		}
	}
}

// moves counts, over many request hashes, those whose owner changes
// between two memberships: to or from the replica that joined or left
// ("own"), and between replicas on both rings ("others"); owners are
// compared by hash key.
func moves(rng *rand.Rand, before, after []ringhash.Endpoint, samples int) (own, others int) {
	rb, ra := ringOf(before), ringOf(after)
	for range samples {
		h := rng.Uint64()
		a, b := before[rb.Owner(h)].HashKey, after[ra.Owner(h)].HashKey
		if a == b {
			continue
		}
		if !hasKey(after, a) || !hasKey(before, b) {
			own++
		} else {
			others++
		}
	}
	return own, others
}

func hasKey(eps []ringhash.Endpoint, key string) bool {
	for _, e := range eps {
		if e.HashKey == key {
			return true
		}
	}
	return false
}

// A replica leaving or joining moves the keys it owns and almost no
// others, for every N the ring size allows: the one other change is the
// entry the last endpoint on the ring goes without, which moves to a new
// last endpoint when the old one leaves or a new one sorts after it
// (about 1/(64 × total weight) of keys).
func TestGRPCRingMembershipMovesOnlyOwnKeys(t *testing.T) {
	const samples = 100000
	rng := rand.New(rand.NewPCG(2, 2))
	worst := 0.0
	check := func(what string, others int) {
		frac := float64(others) / samples
		worst = math.Max(worst, frac)
		if frac > 0.005 {
			t.Errorf("%s moved %.4f of keys between the others", what, frac)
		}
	}
	defer func() { t.Logf("at most %.4f of keys moved between replicas that stayed", worst) }()
	for _, n := range []int{4, 5, 8, 12, 16, 32, 63} {
		for _, maxWeight := range []uint64{1, 4} {
			eps := replicas(rng, n+1, maxWeight)
			if w := totalWeight(eps); w*EntriesPerWeight(0) > ringhash.DefaultCap+1 {
				continue // beyond the cap, entries per weight change with membership
			}
			for trial := range 4 {
				leaving := rng.IntN(n + 1)
				rest := append(append([]ringhash.Endpoint{}, eps[:leaving]...), eps[leaving+1:]...)
				own, others := moves(rng, eps, rest, samples)
				check(fmt.Sprintf("n=%d weights 1..%d trial %d: removing one", n+1, maxWeight, trial), others)
				want := float64(eps[leaving].Weight) / float64(totalWeight(eps))
				if got := float64(own) / samples; math.Abs(got-want) > 0.5*want {
					t.Errorf("n=%d: the leaving replica owned %.3f of keys, weight share %.3f", n+1, got, want)
				}
				_, others = moves(rng, rest, eps, samples)
				check(fmt.Sprintf("n=%d weights 1..%d trial %d: adding one", n, maxWeight, trial), others)
			}
		}
	}
}

func totalWeight(eps []ringhash.Endpoint) uint64 {
	var w uint64
	for _, e := range eps {
		w += e.Weight
	}
	return w
}

func TestEnvoyRingSize(t *testing.T) {
	eps := []Endpoint{
		{Weight: 3}, {Weight: 2, Health: Draining}, {Weight: 1}, {Weight: 4, Health: Unhealthy},
	}
	for _, tc := range []struct {
		k, want uint64
		eps     []Endpoint
	}{
		{512, 512*4 - 1, eps},
		{1, 3, eps},
		{512, 0, eps[1:2]},                  // no healthy weight
		{MaxRingSize, MaxRingSize, eps[:1]}, // beyond Envoy's maximum: the maximum, shared
	} {
		if got := EnvoyRingSize(tc.eps, tc.k); got != tc.want {
			t.Errorf("EnvoyRingSize(%d per unit) = %d, want %d", tc.k, got, tc.want)
		}
	}
	for _, h := range []Hash{
		{Algorithm: Maglev, TableSize: DefaultMaglevTableSize, EntriesPerWeight: 512},
		{Algorithm: RingHash, EntriesPerWeight: 512, MaxRingSize: 4096},
		{Algorithm: RingHash, EntriesPerWeight: MaxRingSize + 1},
	} {
		h.Keys, h.Keyless = []HashKey{{Header: "x"}}, RoundRobin
		if errs := h.validate("p"); len(errs) == 0 {
			t.Errorf("%+v: no error", h)
		}
	}
}

// The model states the gRPC clients' default ring cap itself; it must be
// the clients' own.
func TestDefaultGRPCRingCapIsTheClients(t *testing.T) {
	if DefaultGRPCRingCap != ringhash.DefaultCap {
		t.Fatalf("DefaultGRPCRingCap = %d, the gRPC clients' default cap is %d", DefaultGRPCRingCap, ringhash.DefaultCap)
	}
}
