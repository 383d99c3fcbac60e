package envoylb

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/fleet"
)

var (
	update  = flag.Bool("update", false, "rewrite the testdata golden files")
	measure = flag.Bool("measure", false, "run the measurements (about a minute) and check their goldens")
)

// table is a hash table kvxds may ask Envoy for, as a pool's hash block.
type table struct {
	name string
	hash func(weight uint64) fleet.Hash
}

var tables = []table{
	{"maglev 65537 (default)", func(uint64) fleet.Hash { return fleet.Hash{} }},
	{"ring_hash (Envoy's sizes)", func(uint64) fleet.Hash { return fleet.Hash{Algorithm: fleet.RingHash} }},
	// Rings of a fixed number of entries per unit of healthy weight
	// (entries_per_weight), as kvxds sizes gRPC clients' rings.
	perUnit(64), perUnit(256), perUnit(512), perUnit(1024),
}

func perUnit(n uint64) table {
	return table{fmt.Sprintf("ring_hash, %d per unit", n), func(uint64) fleet.Hash {
		return fleet.Hash{Algorithm: fleet.RingHash, EntriesPerWeight: n}
	}}
}

// TestEnvoyMoves measures, with Envoy's tables built from the resources
// kvxds serves, how many sessions each change kvxds makes moves: to or
// from the changed replica (own), and between replicas that did not
// change. 20,000 sessions hashed on x-session-id, 20 random fleets of N
// replicas with weights 1..4 per row. The file is a golden: fleets,
// sessions and tables are deterministic.
func TestEnvoyMoves(t *testing.T) {
	if !*measure && !*update {
		t.Skip("a measurement: run with -measure (or -update)")
	}
	const fleets, sessions = 20, 20000
	hashes := make([]uint64, sessions)
	for i := range hashes {
		hashes[i], _ = HeaderHash([]string{fmt.Sprintf("session-%d", i)})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Envoy: sessions moved by one change, %% of %d sessions, mean (worst) over %d random fleets, weights 1..4\n", sessions, fleets)
	fmt.Fprintf(&b, "# own: to or from the changed replica; others: between replicas that did not change; balance: largest share of the hash space ÷ weight share, before the change\n")
	fmt.Fprintf(&b, "%-26s %-4s %-7s %-16s %-16s %s\n", "table", "N", "change", "own", "others", "balance")
	for _, tb := range tables {
		for _, n := range []int{4, 16, 64, 256} {
			rng := rand.New(rand.NewPCG(uint64(n), 20))
			type stat struct{ own, others []float64 }
			stats := map[string]*stat{}
			var balance []float64
			changes := []string{"join", "leave", "drain", "weight"}
			for _, c := range changes {
				stats[c] = &stat{}
			}
			for range fleets {
				eps := randomReplicas(rng, n)
				before := build(t, tb, eps)
				balance = append(balance, worstShare(before))
				for _, c := range changes {
					after, changed := change(rng, c, eps)
					b2 := build(t, tb, after)
					own, others := moved(before, b2, changed, hashes)
					stats[c].own = append(stats[c].own, own)
					stats[c].others = append(stats[c].others, others)
				}
			}
			for _, c := range changes {
				fmt.Fprintf(&b, "%-26s %-4d %-7s %-16s %-16s %s\n", tb.name, n, c,
					pct(stats[c].own), pct(stats[c].others), ratio(balance))
			}
		}
	}
	golden(t, "envoy_moves.txt", b.String())
}

func randomReplicas(rng *rand.Rand, n int) []fleet.Endpoint {
	eps := make([]fleet.Endpoint, n)
	for i := range eps {
		eps[i] = randomReplica(rng)
	}
	return eps
}

func randomReplica(rng *rand.Rand) fleet.Endpoint {
	return fleet.Endpoint{
		Host: fmt.Sprintf("10.%d.%d.%d", rng.IntN(256), rng.IntN(256), 1+rng.IntN(254)),
		Port: 8000, Weight: uint32(1 + rng.IntN(4)),
	}
}

// change applies one change kvxds makes to a copy of eps and returns it
// with the identity of the replica that changed.
func change(rng *rand.Rand, kind string, eps []fleet.Endpoint) ([]fleet.Endpoint, string) {
	out := slices.Clone(eps)
	i := rng.IntN(len(out))
	id := fmt.Sprintf("%s:%d", out[i].Host, out[i].Port)
	switch kind {
	case "join":
		e := randomReplica(rng)
		return append(out, e), fmt.Sprintf("%s:%d", e.Host, e.Port)
	case "leave":
		return slices.Delete(out, i, i+1), id
	case "drain":
		out[i].Health = fleet.Draining
	case "weight":
		switch w := out[i].Weight; {
		case w == 1:
			out[i].Weight = 2
		case w == 4 || rng.IntN(2) == 0:
			out[i].Weight = w - 1
		default:
			out[i].Weight = w + 1
		}
	}
	return out, id
}

// build is Envoy's balancer for a pool of eps hashed with tb.
func build(t *testing.T, tb table, eps []fleet.Endpoint) *Balancer {
	var w uint64
	for _, e := range eps {
		if e.Health == fleet.Healthy {
			w += uint64(e.Weight)
		}
	}
	p := fleet.Pool{Name: "p", Settings: fleet.Settings{Port: 10000, Hash: tb.hash(w)}, Endpoints: eps}
	p.Hash.Keys = []fleet.HashKey{{Header: "x-session-id"}}
	b := router(t, fleet.Fleet{Pools: []fleet.Pool{p}}).Balancer("p")
	if b == nil {
		t.Fatal("no table")
	}
	return b
}

// moved is the share of sessions that moved to or from the replica
// changed, and between the others.
func moved(before, after *Balancer, changed string, hashes []uint64) (own, others float64) {
	for _, h := range hashes {
		a, b := before.Hosts[before.Owner(h)].HashKey, after.Hosts[after.Owner(h)].HashKey
		switch {
		case a == b:
		case a == changed || b == changed:
			own++
		default:
			others++
		}
	}
	return own / float64(len(hashes)), others / float64(len(hashes))
}

// worstShare is the largest share of the hash space any replica owns ÷
// its share of the healthy weight.
func worstShare(b *Balancer) float64 {
	var total float64
	for _, w := range b.Weights {
		total += float64(b.Hosts[w.Host].weight())
	}
	shares := b.Table.Shares()
	worst := 0.0
	for _, w := range b.Weights {
		worst = math.Max(worst, shares[w.Host]/(float64(b.Hosts[w.Host].weight())/total))
	}
	return worst
}

func pct(xs []float64) string {
	var sum, worst float64
	for _, x := range xs {
		sum += x
		worst = math.Max(worst, x)
	}
	return fmt.Sprintf("%.2f%% (%.2f%%)", 100*sum/float64(len(xs)), 100*worst)
}

func ratio(xs []float64) string {
	var sum, worst float64
	for _, x := range xs {
		sum += x
		worst = math.Max(worst, x)
	}
	return fmt.Sprintf("%.2f (%.2f)", sum/float64(len(xs)), worst)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	t.Log("\n" + got)
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with go test ./xds/envoylb -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s changed; review and regenerate with -update:\n%s", name, got)
	}
}
