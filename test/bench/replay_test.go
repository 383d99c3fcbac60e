package bench

import (
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/kvxds/kvxds/test/sim"
	"github.com/kvxds/kvxds/test/workload"
)

// ReplayPrefill places a batch's prompts as its rule says: one router
// sees the prompt it placed a moment before; routers that each place one
// of a batch do not see each other's, and pile onto the same replica.
func TestReplayPrefill(t *testing.T) {
	words := distinctWords
	req := func(at time.Duration, key, prompt string) Request {
		return Request{Request: workload.Request{At: at, Prompt: prompt, Session: key, DependsOn: -1}}
	}
	// A warm-up prompt, then a batch of two of 5,000 tokens: 0.5 s and
	// one step each.
	reqs := []Request{req(0, "w", words("w", 100)), req(time.Second, "a", words("a", 5000)), req(time.Second, "b", words("b", 5000))}
	cfg := sim.Config{BlockSize: 16, TokenBudget: 8192, PrefillTokensPerSec: 10_000, DecodeStepBase: 10 * time.Millisecond}
	one, two := 0.51, 1.02
	for _, tc := range []struct {
		name string
		rule ReplayRule
		want []float64
	}{
		{"in turn", ReplayRule{Place: PlaceTurn}, []float64{one, one}},
		{"the ideal router", ReplayRule{Place: PlaceEarliest}, []float64{one, one}},
		{"least loaded, one router", ReplayRule{Place: PlaceLeast, Routers: 1}, []float64{one, one}},
		{"least loaded, counting what is left", ReplayRule{Place: PlaceLeast, Left: true}, []float64{one, one}},
		// Router 1 places a, router 0 places b: each sees the replicas
		// idle, and both take the first.
		{"least loaded, two routers", ReplayRule{Place: PlaceLeast, Routers: 2}, []float64{one, two}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ReplayPrefill(reqs, 1, 2, 1000, cfg, tc.rule)
			if len(got) != len(tc.want) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
			for i := range got {
				if math.Abs(got[i]-tc.want[i]) > 1e-9 {
					t.Errorf("request %d: %.4f s, want %.4f s", i+1, got[i], tc.want[i])
				}
			}
		})
	}
	// The ideal router's model with a cache per replica: where no two
	// prompts share a prefix, the ideal router's times.
	if got, want := ReplayPrefill(reqs, 1, 2, 1000, cfg, ReplayRule{Place: PlaceEarliest}), idealPrefillTimes(reqs, 1, 2, 1000, cfg); !slices.Equal(got, want) {
		t.Errorf("earliest %v, ideal %v", got, want)
	}
	// A turn waits for its dependency's reply (10 tokens, a step each):
	// b arrives at 1.61 s, once a is computed, and the two routers no
	// longer pile up.
	dep := slices.Clone(reqs)
	dep[1].MaxTokens, dep[2].DependsOn = 10, 1
	if got := ReplayPrefill(dep, 1, 2, 1000, cfg, ReplayRule{Place: PlaceLeast, Routers: 2}); !slices.Equal(got, []float64{one, one}) {
		t.Errorf("closed loop: %v, want [%v %v]", got, one, one)
	}
	// Routers that learn of each other's prompts from a table every 10 s
	// do not see a (placed at 1 s) when b comes at 1.2 s: b waits behind
	// it, until 1.51 s. Without a table the router sees it.
	late := slices.Clone(reqs)
	late[2].At = 1200 * time.Millisecond
	for _, tc := range []struct {
		table float64
		want  float64
	}{{10, 0.31 + one}, {0, one}} {
		got := ReplayPrefill(late, 1, 2, 1000, cfg, ReplayRule{Place: PlaceLeast, Routers: 2, Table: tc.table})
		if len(got) != 2 || math.Abs(got[1]-tc.want) > 1e-9 {
			t.Errorf("table every %v s: %v, want b %.2f s", tc.table, got, tc.want)
		}
	}
}

// replaySlot: a key placed before goes back under the pool's factor,
// else to the first replica of its order under it; a new key goes to the
// first of its order under its share of the mean, or where its rule
// says.
func TestReplaySlot(t *testing.T) {
	const key = "k"
	o, _ := replayOrder(key, 4)
	at := func(vals map[int]float64) []float64 {
		l := make([]float64, 4)
		for k, v := range vals {
			l[k] = v
		}
		return l
	}
	for _, tc := range []struct {
		name  string
		place Placement
		load  []float64
		went  map[string]int
		want  int
	}{
		{"placed, under the bound", PlaceSlot, at(map[int]float64{o[3]: 1000, o[0]: 1000}), map[string]int{key: o[3]}, o[3]},
		// 20,000 over 2.5 × 21,000 / 4: over.
		{"placed, over the bound", PlaceSlot, at(map[int]float64{o[3]: 20000}), map[string]int{key: o[3]}, o[0]},
		{"new, all idle", PlaceSlot, at(nil), nil, o[0]},
		// 10,000 over 11,000 / 4: over its share of the mean.
		{"new, its replica over the mean", PlaceSlot, at(map[int]float64{o[0]: 10000}), nil, o[1]},
		{"new, sampled where there is room", PlaceSampled, at(map[int]float64{o[0]: 9000, o[1]: 9000, o[2]: 9000}), nil, o[3]},
		{"new, the least of three", PlaceLeastOfThree, at(map[int]float64{o[0]: 3000, o[1]: 2000, o[2]: 2500}), nil, o[1]},
		{"new, where the fewest tokens were sent", PlaceFewestSent, at(map[int]float64{o[2]: 5000}), nil, o[2]},
		{"placed, where the fewest tokens were sent", PlaceFewestSent, at(nil), map[string]int{key: o[1]}, o[1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			went := tc.went
			if went == nil {
				went = map[string]int{}
			}
			// Sent: the most to o[0], the fewest to o[2].
			sent := at(map[int]float64{o[0]: 9000, o[1]: 8000, o[3]: 7000})
			if got := replaySlot(tc.place, key, 1000, tc.load, went, ReplayFactor, sent); got != tc.want {
				t.Errorf("replica %d, want %d (order %v, load %v)", got, tc.want, o, tc.load)
			}
		})
	}
}

// TestReplayMooncake replays Mooncake's conversation trace at 6:2 under
// each rule, with one router and with 8 (KVXDS_REPLAY=1; half a minute):
// the table of docs/benchmarks/prefill-decode.md. In it the rules that
// place each prompt by the exact queue reach the ideal router's tail
// only with one router; 8 routers blind within a batch pile onto the
// same replicas.
func TestReplayMooncake(t *testing.T) {
	if os.Getenv("KVXDS_REPLAY") == "" {
		t.Skip("KVXDS_REPLAY=1 replays the trace")
	}
	c := Config{Trace: "testdata/mooncake_conversation_trace.jsonl.gz", PD: PD{Prefill: 6, Decode: 2}, Load: 0.7, PrefixBlocks: []int{4}}.Defaults()
	p, err := planTrace(c)
	if err != nil {
		t.Fatal(err)
	}
	q := withBodyKey(p, PrefixKey(PrefixBytes(4)))
	cfg := simConfig(p.KVBlocks, 1)
	p95 := func(rule ReplayRule) float64 {
		return quantiles(ReplayPrefill(q.Requests, q.Warmup, c.PD.Prefill, p.KVBlocks, cfg, rule)).P95
	}
	rr := p95(ReplayRule{Place: PlaceTurn})
	t.Logf("in turn: %.2f s", rr)
	results := map[string][2]float64{}
	for _, r := range []struct {
		name  string
		place Placement
		left  bool
	}{
		{"the ideal router", PlaceEarliest, false},
		{"least loaded, what is left", PlaceLeast, true},
		{"least loaded, whole", PlaceLeast, false},
		{"slot, whole", PlaceSlot, false},
		{"slot, what is left", PlaceSlot, true},
		{"sampled by room, what is left", PlaceSampled, true},
		{"least of three, whole", PlaceLeastOfThree, false},
	} {
		one := p95(ReplayRule{Place: r.place, Left: r.left, Routers: 1})
		eight := p95(ReplayRule{Place: r.place, Left: r.left, Routers: 8})
		results[r.name] = [2]float64{one, eight}
		t.Logf("%-30s one router %.2f s (%.2f×), 8 routers %.2f s (%.2f×)", r.name, one, one/rr, eight, eight/rr)
	}
	if l := results["least loaded, whole"]; !(l[1] > l[0]) {
		t.Errorf("least loaded: 8 routers %.2f s, one %.2f s; want 8 routers slower", l[1], l[0])
	}
	if i := results["the ideal router"]; !(i[0] < 0.5*rr) {
		t.Errorf("the ideal router %.2f s, round robin %.2f s: want under half", i[0], rr)
	}
}

// TestReplayChat replays the chat workload at P/D 4:4 and load 0.7 (five
// seeds; KVXDS_REPLAY=1, about a minute) under the index router's rule
// and under table rules of 8 routers, each session's turns through one,
// as the bench's Envoys send them: the table of
// docs/benchmarks/prefill-decode.md. In it the index router's tail is
// shorter than kvxds's rule's; placing new sessions, and turns that
// find little of their prompt cached, where the fewest tokens were sent
// is shorter still when one router counts every prompt, and longer than
// the index router's when 8 learn the count from a table every second.
func TestReplayChat(t *testing.T) {
	if os.Getenv("KVXDS_REPLAY") == "" {
		t.Skip("KVXDS_REPLAY=1 replays the chat workload")
	}
	kvxds := ReplayRule{Place: PlaceSlot, Routers: 8, Sticky: true, Table: 1, Factor: 1000}
	fewest := func(routers int, table float64) ReplayRule {
		return ReplayRule{Place: PlaceFewestSent, Routers: routers, Sticky: true, Table: table, Factor: 1000, Replace: 0.3}
	}
	rules := []struct {
		name string
		rule ReplayRule
	}{
		{"in turn", ReplayRule{Place: PlaceTurn}},
		{"the index router", ReplayRule{Place: PlaceIndex}},
		{"kvxds's rule, 8 routers, a table every second", kvxds},
		{"kvxds's rule, 8 routers, a table every 0.25 s", ReplayRule{Place: PlaceSlot, Routers: 8, Sticky: true, Table: 0.25, Factor: 1000}},
		{"kvxds's rule, 8 routers, a table every 0.1 s", ReplayRule{Place: PlaceSlot, Routers: 8, Sticky: true, Table: 0.1, Factor: 1000}},
		{"kvxds's rule, one router", ReplayRule{Place: PlaceSlot, Factor: 1000}},
		{"fewest sent, one router", ReplayRule{Place: PlaceFewestSent, Factor: 1000}},
		{"fewest sent or little cached, one router", fewest(1, 0)},
		{"the same, 8 routers each counting its own", fewest(8, 1e9)},
		{"the same, 8 routers, a table every second", fewest(8, 1)},
		{"the same, 8 routers, a table every 0.25 s", fewest(8, 0.25)},
		{"the same, 8 routers, a table every 0.1 s", fewest(8, 0.1)},
		{"the same, 8 routers, a table every 0.03 s", fewest(8, 0.03)},
	}
	means := map[string]float64{}
	const seeds = 5
	for seed := uint64(1); seed <= seeds; seed++ {
		c := Config{Workloads: []string{"chat"}, PD: PD{Prefill: 4, Decode: 4}, Load: 0.7, Seed: seed}.Defaults()
		p, err := planWorkload(c, "chat")
		if err != nil {
			t.Fatal(err)
		}
		q, _, _, err := pdKey(c, p)
		if err != nil {
			t.Fatal(err)
		}
		cfg := simConfig(p.KVBlocks, 1)
		for _, r := range rules {
			p95 := quantiles(ReplayPrefill(q.Requests, q.Warmup, c.PD.Prefill, p.KVBlocks, cfg, r.rule)).P95
			means[r.name] += p95 / seeds
			t.Logf("seed %d, %-50s %.0f ms", seed, r.name, 1000*p95)
		}
	}
	for _, r := range rules {
		t.Logf("%-50s %.0f ms (%.2f× the index router's)", r.name, 1000*means[r.name], means[r.name]/means["the index router"])
	}
	index, deployed := means["the index router"], means["kvxds's rule, 8 routers, a table every second"]
	if !(index < deployed) {
		t.Errorf("the index router %.0f ms, kvxds's rule %.0f ms: want the router shorter", 1000*index, 1000*deployed)
	}
	if one, table := means["fewest sent or little cached, one router"], means["the same, 8 routers, a table every second"]; !(one < index && table > index) {
		t.Errorf("fewest sent: one router %.0f ms, 8 with a table every second %.0f ms, the index router %.0f ms: want the router between them",
			1000*one, 1000*table, 1000*index)
	}
}
