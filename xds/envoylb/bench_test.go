package envoylb

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkBuild builds the table Envoy rebuilds on every EDS change of a
// 1,000-replica pool (weights 1..4): Maglev at the default size and rings
// of a fixed number of entries per unit of weight. envoy-bytes is the
// table's size in Envoy (OriginalMaglevTable: a 16-byte shared pointer
// per slot; the ring: a hash and a shared pointer, 24 bytes, per entry).
// Envoy's workers share the table the main thread builds.
func BenchmarkBuild(b *testing.B) {
	rng := rand.New(rand.NewPCG(1000, 4))
	hosts := make([]Host, 1000)
	var w uint64
	for i := range hosts {
		hosts[i] = Host{Address: fmt.Sprintf("10.%d.%d.%d:8000", rng.IntN(256), rng.IntN(256), 1+rng.IntN(254)), Weight: uint32(1 + rng.IntN(4))}
		w += uint64(hosts[i].Weight)
	}
	for _, tc := range []struct {
		name string
		c    Config
	}{
		{"maglev-65537", Config{}},
		{"ring-64-per-unit", Config{Algorithm: RingHash, MinRingSize: 64 * w, MaxRingSize: 64 * w}},
		{"ring-256-per-unit", Config{Algorithm: RingHash, MinRingSize: 256 * w, MaxRingSize: 256 * w}},
		{"ring-512-per-unit", Config{Algorithm: RingHash, MinRingSize: 512 * w, MaxRingSize: 512 * w}},
		{"ring-1024-per-unit", Config{Algorithm: RingHash, MinRingSize: 1024 * w, MaxRingSize: 1024 * w}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var bytes int
			for b.Loop() {
				bl, err := New(hosts, tc.c)
				if err != nil {
					b.Fatal(err)
				}
				switch t := bl.Table.(type) {
				case *MaglevTable:
					bytes = 16 * len(t.Slots)
				case *Ring:
					bytes = 24 * len(t.Hashes)
				}
			}
			b.ReportMetric(float64(bytes), "envoy-bytes")
		})
	}
}
