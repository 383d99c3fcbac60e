package translate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/ringhash"
)

// TestGRPCRingBalance records, for docs/concepts/consistency.md, how
// evenly gRPC clients' rings share keys under kvxds's sizing: the largest
// share of the hash space any replica owns ÷ its weight share, over 20
// fleets of addresses each, for N = 4..64 and weights 1 or 1..4. The file
// is a golden: the sizing and the clients' ring are deterministic.
func TestGRPCRingBalance(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "# largest share of the hash space ÷ weight share, gRPC clients' ring hash sized by kvxds; 20 fleets each\n")
	fmt.Fprintf(&b, "%-6s %-4s %-8s %-12s %-9s %-7s %-7s %-7s\n", "cap", "N", "weights", "entries/w", "ring", "mean", "p90", "worst")
	for _, ringCap := range []uint64{4096, 16384, 65536} {
		for _, n := range []int{4, 8, 16, 32, 64} {
			for _, maxWeight := range []uint64{1, 4} {
				rng := rand.New(rand.NewPCG(uint64(n), maxWeight))
				const fleets = 20
				var ratios []float64
				var entries int
				for range fleets {
					eps := replicas(rng, n, maxWeight)
					r := ringWithCap(eps, ringCap)
					entries += len(r.Entries)
					shares := r.Shares()
					w := float64(totalWeight(eps))
					worst := 0.0
					for i, e := range eps {
						worst = math.Max(worst, shares[i]/(float64(e.Weight)/w))
					}
					ratios = append(ratios, worst)
				}
				mean, p90, maxR := summarize(ratios)
				perWeight := fmt.Sprint(fleet.EntriesPerWeight(ringCap))
				if w := uint64(n) * maxWeight; w*fleet.EntriesPerWeight(ringCap) > ringCap+1 {
					perWeight = "fewer"
				}
				fmt.Fprintf(&b, "%-6d %-4d 1..%-5d %-12s %-9d %-7.3f %-7.3f %-7.3f\n", ringCap, n, maxWeight, perWeight, entries/fleets, mean, p90, maxR)
			}
		}
	}
	got := b.String()
	t.Log("\n" + got)
	path := filepath.Join("testdata", "ring_balance.txt")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with go test ./xds/translate -update)", err)
	}
	if got != string(want) {
		t.Errorf("ring balance changed; review and regenerate with -update:\n%s", got)
	}
}

func summarize(xs []float64) (mean, p90, maxX float64) {
	s := append([]float64{}, xs...)
	for i := range s {
		mean += s[i] / float64(len(s))
	}
	slices.Sort(s)
	return mean, s[(len(s)*9)/10-1], s[len(s)-1]
}

func ringWithCap(eps []ringhash.Endpoint, ringCap uint64) *ringhash.Ring {
	size := fleet.GRPCRingSize(totalWeight(eps), ringCap)
	return ringhash.Build(eps, size, size)
}

func replicas(rng *rand.Rand, n int, maxWeight uint64) []ringhash.Endpoint {
	out := make([]ringhash.Endpoint, n)
	for i := range out {
		out[i] = ringhash.Endpoint{HashKey: fmt.Sprintf("10.%d.%d.%d:8000", rng.IntN(256), i/250, i%250+1), Weight: 1 + rng.Uint64N(maxWeight)}
	}
	return out
}

func totalWeight(eps []ringhash.Endpoint) uint64 {
	var w uint64
	for _, e := range eps {
		w += e.Weight
	}
	return w
}
