package bench

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvxds/kvxds/test/sim"
	"github.com/kvxds/kvxds/test/workload"
)

func adapterRequests(names ...string) []Request {
	out := make([]Request, len(names))
	for i, n := range names {
		out[i].Adapter = n
	}
	return out
}

func TestSwapInFloor(t *testing.T) {
	for _, tc := range []struct {
		name        string
		reqs        []Request
		warm, slots int
		want        int
	}{
		{"every adapter fits", adapterRequests("a", "b", "a", "c", "b"), 0, 3, 0},
		{"one slot swaps on every change", adapterRequests("a", "b", "a", "b"), 0, 1, 3},
		// From {a, b}: c evicts b (needed later than a), b evicts a.
		{"the farthest next use goes", adapterRequests("a", "b", "c", "a", "b", "c"), 0, 2, 2},
		{"base-model requests need no slot", adapterRequests("a", "", "b", "", "a", "b"), 0, 1, 3},
		{"warm-up is not counted", adapterRequests("c", "d", "c", "d", "a", "b", "a"), 4, 1, 2},
		{"no adapters", adapterRequests("", ""), 0, 4, 0},
		{"warm past the end", adapterRequests("a", "b"), 3, 1, 0},
	} {
		if got := SwapInFloor(tc.reqs, tc.warm, tc.slots); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// The floor is the optimum: on short random streams it equals the fewest
// loads over every starting set and every eviction, found exhaustively.
func TestSwapInFloorIsOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "b", "c", "d", "e"}
	for trial := range 300 {
		slots := 1 + rng.IntN(3)
		reqs := make([]Request, 4+rng.IntN(9))
		for i := range reqs {
			if rng.IntN(6) > 0 {
				reqs[i].Adapter = names[rng.IntN(len(names))]
			}
		}
		if got, want := SwapInFloor(reqs, 0, slots), exhaustiveFloor(reqs, len(names), slots); got != want {
			t.Fatalf("trial %d: %v with %d slots: floor %d, exhaustive %d", trial, reqs, slots, got, want)
		}
	}
}

// exhaustiveFloor is the fewest loads of n adapters ("a"...) into slots
// slots, over every loaded set to start from and every eviction.
func exhaustiveFloor(reqs []Request, n, slots int) int {
	const inf = 1 << 30
	cost := make([]int, 1<<n)
	for s := range cost {
		if bits.OnesCount(uint(s)) > slots {
			cost[s] = inf
		}
	}
	for _, r := range reqs {
		if r.Adapter == "" {
			continue
		}
		a := 1 << (r.Adapter[0] - 'a')
		next := make([]int, len(cost))
		for s := range next {
			next[s] = inf
		}
		for s, c := range cost {
			switch {
			case c == inf:
			case s&a != 0:
				next[s] = min(next[s], c)
			case bits.OnesCount(uint(s)) < slots:
				next[s|a] = min(next[s|a], c+1)
			default:
				for v := 1; v < len(cost); v <<= 1 {
					if s&v != 0 {
						next[s&^v|a] = min(next[s&^v|a], c+1)
					}
				}
			}
		}
		cost = next
	}
	best := inf
	for _, c := range cost {
		best = min(best, c)
	}
	return best
}

// distinctWords is a prompt of n words, each a token of its own:
// prefix0 prefix1 ...
func distinctWords(prefix string, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return strings.Join(w, " ")
}

// The ideal router's prefill TTFT: prompts in arrival order on the
// replica that frees first, each computing what one cache of the whole
// fleet misses (a prompt extending a cached one computes its new tokens
// only), in ceil(tokens / budget) steps; none where a request waits for
// another's reply.
func TestIdealPrefillTimes(t *testing.T) {
	words := distinctWords
	req := func(at time.Duration, prompt string) Request {
		return Request{Request: workload.Request{At: at, Prompt: prompt, DependsOn: -1}}
	}
	a := words("a", 10_000)
	reqs := []Request{
		req(0, words("w", 100)), // warm-up
		req(time.Second, a),
		req(time.Second, words("b", 10_000)),
		req(time.Second, words("c", 5_000)),
		req(5*time.Second, a+" "+words("d", 1_600)),
	}
	cfg := sim.Config{BlockSize: 16, TokenBudget: 8192, PrefillTokensPerSec: 10_000, DecodeStepBase: 10 * time.Millisecond}
	got := idealPrefillTimes(reqs, 1, 2, 1000, cfg)
	// a and b start at once on the two replicas, 1 s and two steps each;
	// c waits for the first to free (at 2.02 s), then 0.5 s and a step;
	// the last hits a's 10,000 tokens and computes 1,600 in one step.
	want := []float64{1.02, 1.02, 1.02 + 0.51, 0.17}
	if len(got) != len(want) {
		t.Fatalf("%d times %v, want %v", len(got), got, want)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Errorf("request %d: %.4f s, want %.4f s", i+1, got[i], want[i])
		}
	}
	// A cache of one replica's blocks on one replica: the last misses.
	if got := idealPrefillTimes(reqs, 1, 1, 100, cfg); got[3] < 1 {
		t.Errorf("with a cache of 100 blocks the last prompt took %.3f s, want its whole 11,600 tokens", got[3])
	}
	reqs[4].DependsOn = 1
	if got := IdealPrefillTTFT(reqs, 1, 2, 1000, cfg); !math.IsNaN(got.P95) {
		t.Errorf("a closed-loop stream has an ideal TTFT %v", got)
	}
}
