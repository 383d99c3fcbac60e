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
	// A conversation's turns wait for each other's replies: no replay.
	dep := slices.Clone(reqs)
	dep[2].DependsOn = 1
	if got := ReplayPrefill(dep, 1, 2, 1000, cfg, ReplayRule{}); got != nil {
		t.Errorf("closed loop: %v, want none", got)
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			went := tc.went
			if went == nil {
				went = map[string]int{}
			}
			if got := replaySlot(tc.place, key, 1000, tc.load, went); got != tc.want {
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
