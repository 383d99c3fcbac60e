package envoylb

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestEnvoyBoundedLoad measures bounded load (balance_factor) on each
// table: 16 replicas with weights 1..4, 2,000 sessions with Zipf(1.1)
// popularity (the hottest sends about a sixth of the requests), 64
// requests in flight, each finishing after the next 64 arrive; 50,000
// requests, 3 random fleets. Spilled: requests not sent to the session's
// owner in the table. Busiest: the largest mean in-flight count of a
// replica ÷ its weight's share of the requests in flight.
func TestEnvoyBoundedLoad(t *testing.T) {
	if !*measure && !*update {
		t.Skip("a measurement: run with -measure (or -update)")
	}
	const (
		replicas, sessions, inFlight, requests, fleets = 16, 2000, 64, 50000, 3
	)
	var b strings.Builder
	fmt.Fprintf(&b, "# Envoy bounded load: %d replicas (weights 1..4), %d Zipf(1.1) sessions, %d requests in flight, %d requests, mean (worst) over %d fleets\n", replicas, sessions, inFlight, requests, fleets)
	fmt.Fprintf(&b, "%-26s %-7s %-16s %s\n", "table", "factor", "spilled", "busiest ÷ fair")
	for _, tb := range []table{tables[0], perUnit(64), perUnit(256), perUnit(512), perUnit(1024)} {
		for _, factor := range []uint32{0, 150, 125} {
			var spilled, busiest []float64
			rng := rand.New(rand.NewPCG(16, 150))
			for range fleets {
				eps := randomReplicas(rng, replicas)
				bl := build(t, tb, eps)
				bl.Config.HashBalanceFactor = factor
				s, m := simulate(bl, rand.New(rand.NewPCG(1, 2)), sessions, inFlight, requests)
				spilled, busiest = append(spilled, s), append(busiest, m)
			}
			fmt.Fprintf(&b, "%-26s %-7d %-16s %s\n", tb.name, factor, pct(spilled), ratio(busiest))
		}
	}
	golden(t, "envoy_bounded.txt", b.String())
}

// simulate runs the closed loop of TestEnvoyBoundedLoad on b.
func simulate(b *Balancer, rng *rand.Rand, sessions, inFlight, requests int) (spilled, busiest float64) {
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(sessions-1))
	hashes := make([]uint64, sessions)
	for i := range hashes {
		hashes[i] = seeded(fmt.Sprintf("session-%d", i), 0)
	}
	load := &Load{Active: make([]uint32, len(b.Hosts))}
	queue := make([]int, 0, inFlight)
	sum := make([]float64, len(b.Hosts))
	var total float64
	for _, w := range b.Weights {
		total += float64(b.Hosts[w.Host].weight())
	}
	var spills int
	for range requests {
		if len(queue) == inFlight {
			load.Active[queue[0]]--
			load.Total--
			queue = queue[1:]
		}
		h := hashes[zipf.Uint64()]
		host := b.Choose(h, load)
		if host != b.Owner(h) {
			spills++
		}
		load.Active[host]++
		load.Total++
		queue = append(queue, host)
		for i, a := range load.Active {
			sum[i] += float64(a)
		}
	}
	for _, w := range b.Weights {
		fair := float64(inFlight) * float64(b.Hosts[w.Host].weight()) / total
		busiest = math.Max(busiest, sum[w.Host]/float64(requests)/fair)
	}
	return float64(spills) / float64(requests), busiest
}
