package bench

import (
	"math/bits"
	"math/rand/v2"
	"testing"
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
