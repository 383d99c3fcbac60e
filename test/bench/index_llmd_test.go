package bench

import (
	"math"
	"strings"
	"testing"
)

// fakeStats is the engines' waiting queues and KV usage an LLMDRouter
// reads.
type fakeStats struct {
	waiting []int
	kv      []float64
}

func (f *fakeStats) read(i int) (int, float64) { return f.waiting[i], f.kv[i] }

func newFakeLLMD(n int, cfg LLMDConfig) (*LLMDRouter, *fakeStats) {
	f := &fakeStats{waiting: make([]int, n), kv: make([]float64, n)}
	return NewLLMDRouter(n, cfg, f.read), f
}

// block is one 64-byte block of the default configuration (16 tokens × 4
// characters).
func block(c byte) string { return strings.Repeat(string(c), 64) }

func TestLLMDBlockHashes(t *testing.T) {
	x, _ := newFakeLLMD(1, DefaultLLMDConfig())
	if got := len(x.blockHashes(block('a')+block('b')+"tail", "")); got != 3 {
		t.Errorf("%d blocks, want 3 (the last one partial)", got)
	}
	// Chained: the same block after a different first block hashes apart.
	ab, cb := x.blockHashes(block('a')+block('b'), ""), x.blockHashes(block('c')+block('b'), "")
	if ab[1] == cb[1] {
		t.Error("block b hashes alike after different prefixes")
	}
	if again := x.blockHashes(block('a')+block('b'), ""); again[1] != ab[1] {
		t.Error("block hashes are not deterministic")
	}
	cfg := DefaultLLMDConfig()
	cfg.MaxPrefixTokens = 32 // two blocks
	y, _ := newFakeLLMD(1, cfg)
	if got := len(y.blockHashes(strings.Repeat(block('a'), 5), "")); got != 2 {
		t.Errorf("%d blocks under a 2-block cap", got)
	}
}

func TestLLMDRouter(t *testing.T) {
	doc := block('d') + block('e') + block('f') + block('g')
	for _, tc := range []struct {
		name   string
		served []string // served[i]: a prompt replica i served before
		wait   []int
		kv     []float64
		prompt string
		want   int
	}{
		{name: "longest match wins", served: []string{block('x'), doc[:128], doc},
			wait: []int{0, 0, 0}, kv: []float64{0, 0, 0}, prompt: doc + block('q'), want: 2},
		{name: "a match outweighs a longer queue",
			// Holder: 2×0 + 2×1 + 3×1 = 5; others 2×1 + 2×1 = 4.
			served: []string{doc, block('x')}, wait: []int{5, 0}, kv: []float64{0, 0}, prompt: doc, want: 0},
		{name: "a full KV cache and a longer queue outweigh a match",
			// Holder: 0 + 2×0.1 + 3 = 3.2; other 2 + 2 = 4.
			served: []string{doc, block('x')}, wait: []int{5, 0}, kv: []float64{0.9, 0}, prompt: doc, want: 1},
		{name: "half a match against an idler replica",
			// Holder: 2×0 + 2×0.5 + 3×0.5 = 2.5; other 2×1 + 2×1 = 4.
			served: []string{doc[:128], block('x')}, wait: []int{2, 0}, kv: []float64{0.5, 0}, prompt: doc, want: 1},
		{name: "no match: the emptier KV cache", served: []string{block('x'), block('y'), block('z')},
			wait: []int{0, 0, 0}, kv: []float64{0.5, 0.2, 0.4}, prompt: doc, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, f := newFakeLLMD(len(tc.wait), DefaultLLMDConfig())
			for i, p := range tc.served {
				x.commit(x.blockHashes(p, ""), i)
			}
			copy(f.waiting, tc.wait)
			copy(f.kv, tc.kv)
			if got := x.Pick(tc.prompt); got != tc.want {
				score, match := x.scores(x.blockHashes(tc.prompt, ""), "")
				t.Errorf("Pick = %d, want %d (scores %v, matches %v)", got, tc.want, score, match)
			}
		})
	}
}

// Queue scores are min-max normalised: the shortest queue 1, the longest
// 0, all 1 when equal.
func TestLLMDQueueScore(t *testing.T) {
	x, f := newFakeLLMD(3, DefaultLLMDConfig())
	f.waiting = []int{4, 2, 0}
	score, _ := x.scores(nil, "")
	for i, want := range []float64{0 + 2, 2*0.5 + 2, 2*1 + 2} {
		if math.Abs(score[i]-want) > 1e-9 {
			t.Errorf("replica %d: score %v, want %v", i, score[i], want)
		}
	}
	f.waiting = []int{3, 3, 3}
	if score, _ := x.scores(nil, ""); score[0] != 4 || score[2] != 4 {
		t.Errorf("equal queues: scores %v, want 4 each", score)
	}
}

// Equal scores go to the replicas in turn; a replica's LRU evicts its
// oldest blocks, which then match no more.
func TestLLMDTiesAndEviction(t *testing.T) {
	cfg := DefaultLLMDConfig()
	cfg.LRUCapacity = 2
	x, _ := newFakeLLMD(3, cfg)
	for i, p := range []string{block('a'), block('b'), block('c')} {
		if got := x.Pick(p); got != i {
			t.Fatalf("pick %d went to %d, want %d in turn", i, got, i)
		}
	}
	// Replica 0 holds a; two more blocks of its own push it out.
	x.turn = 0
	x.Pick(block('a') + block('p'))
	if s := x.holders[x.blockHashes(block('a'), "")[0]]; len(s) != 1 {
		t.Fatalf("block a held by %v", s)
	}
	x.turn = 0
	if got := x.Pick(block('q') + block('r')); got != 0 {
		t.Fatalf("unmatched prompt went to %d, want 0 in turn", got)
	}
	if s := x.holders[x.blockHashes(block('a'), "")[0]]; len(s) != 0 {
		t.Errorf("block a still held by %v after replica 0's LRU evicted it", s)
	}
	if m, b := x.Matched(); m != 1 || b != 7 {
		t.Errorf("matched %d of %d blocks, want 1 of 7", m, b)
	}
}
