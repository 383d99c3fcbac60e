package envoylb

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvxds/kvxds/fleet"
)

// TestEntriesPerWeight checks, through the served Cluster, that Envoy's
// ring scale and running sums give each host of a ring sized by
// entries_per_weight exactly entries × its weight, the last host in
// host-set order entries × weight or one less, and that a host's count
// never depends on the others: a change moves only the changed replica's
// arcs (and the last host's one entry).
func TestEntriesPerWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, k := range []uint64{1, 64, 256, 1024} {
		for trial := range 12 {
			n := 1 + rng.IntN(300)
			if trial == 0 {
				n = 1
			}
			eps := randomReplicas(rng, n)
			maxW := 4
			if k <= 64 {
				maxW = 128
			}
			var total uint64
			for i := range eps {
				eps[i].Weight = uint32(1 + rng.IntN(maxW))
				if rng.IntN(10) == 0 {
					eps[i].Health = fleet.Draining
				}
			}
			eps[0].Health = fleet.Healthy
			for _, e := range eps {
				if e.Health == fleet.Healthy {
					total += uint64(e.Weight)
				}
			}
			if k*total > fleet.MaxRingSize {
				continue // beyond Envoy's maximum: shared out, not exact
			}
			t.Run(fmt.Sprintf("k%d/n%d", k, n), func(t *testing.T) {
				b := build(t, perUnit(k), eps)
				ring := b.Table.(*Ring)
				for j, w := range b.Weights {
					want, got := int(k)*int(b.Hosts[w.Host].weight()), ring.Counts[w.Host]
					if got == want || j == len(b.Weights)-1 && got == want-1 {
						continue
					}
					t.Errorf("host %d of %d (%s, weight %d): %d entries, want %d",
						j, len(b.Weights), b.Hosts[w.Host].Key(false), b.Hosts[w.Host].Weight, got, want)
				}
			})
		}
	}
}
