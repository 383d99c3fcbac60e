package sim

import (
	"math/rand/v2"
	"testing"
)

// seq returns n distinct-looking token ids starting at base.
func seq(base, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (base + i) % VocabSize
	}
	return out
}

func cat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// checkInvariants verifies the pool's bookkeeping: the free queue holds
// exactly the unreferenced blocks, the hash map matches the blocks, and
// nothing exceeds the capacity.
func checkInvariants(t *testing.T, c *Cache) {
	t.Helper()
	n := 0
	prev := int32(nilBlock)
	for i := c.head; i != nilBlock; i = c.blocks[i].next {
		b := &c.blocks[i]
		if !b.inFree || b.ref != 0 || b.prev != prev {
			t.Fatalf("free queue block %d: inFree=%v ref=%d prev=%d want prev %d", i, b.inFree, b.ref, b.prev, prev)
		}
		prev = i
		n++
		if n > len(c.blocks) {
			t.Fatal("free queue has a cycle")
		}
	}
	if prev != c.tail || n != c.numFree {
		t.Fatalf("free queue: counted %d (tail %d), numFree %d (tail %d)", n, prev, c.numFree, c.tail)
	}
	hashed := 0
	for i := range c.blocks {
		b := &c.blocks[i]
		if b.ref < 0 || (b.ref == 0) != b.inFree {
			t.Fatalf("block %d: ref %d inFree %v", i, b.ref, b.inFree)
		}
		if b.hashed {
			hashed++
			if j, ok := c.byHash[b.hash]; !ok || j != int32(i) {
				t.Fatalf("block %d hashed but map has %d,%v", i, j, ok)
			}
		}
	}
	if hashed != len(c.byHash) || hashed > c.Capacity() {
		t.Fatalf("hashed blocks %d, map %d, capacity %d", hashed, len(c.byHash), c.Capacity())
	}
}

func probe(c *Cache, tokens []int) int {
	hit, _ := c.Match(AppendBlockHashes(nil, tokens, c.BlockSize()))
	return hit * c.BlockSize()
}

func TestCacheHitsOnlyFullBlockPrefix(t *testing.T) {
	c := NewCache(100, 4)
	prompt := seq(1, 10) // 2 full blocks + 2 tokens
	if got := c.Lookup(prompt); got != 0 {
		t.Fatalf("cold lookup hit %d tokens", got)
	}
	c.Insert(prompt)
	if got := c.CachedBlocks(); got != 2 {
		t.Fatalf("cached %d blocks, want 2 (the partial block is not cached)", got)
	}
	for _, tc := range []struct {
		name   string
		tokens []int
		want   int
	}{
		{"same prompt", prompt, 8},
		{"longer prompt", cat(prompt, seq(500, 20)), 8},
		{"one block and a bit", prompt[:7], 4},
		{"shorter than a block", prompt[:3], 0},
		{"diverges in block 2", cat(prompt[:6], seq(900, 6)), 4},
		{"diverges in block 1", cat(seq(700, 1), prompt[1:]), 0},
	} {
		if got := c.Lookup(tc.tokens); got != tc.want {
			t.Errorf("%s: hit %d tokens, want %d", tc.name, got, tc.want)
		}
	}
	// The partial third block completed by a longer prompt is a new block.
	c.Insert(cat(prompt, seq(11, 2)))
	if got := c.Lookup(cat(prompt, seq(11, 2))); got != 12 {
		t.Errorf("after completing block 3: hit %d, want 12", got)
	}
	checkInvariants(t, c)
}

func TestCacheHashesAreChained(t *testing.T) {
	c := NewCache(100, 4)
	a, b, x := seq(100, 4), seq(200, 4), seq(300, 4)
	c.Insert(cat(a, b))
	if got := c.Lookup(cat(x, b)); got != 0 {
		t.Errorf("block b after a different first block hit %d tokens", got)
	}
	if got := c.Lookup(b); got != 0 {
		t.Errorf("block b at the start hit %d tokens", got)
	}
	if got := c.Lookup(cat(a, b)); got != 8 {
		t.Errorf("a+b hit %d tokens, want 8", got)
	}
	if HashBlock(rootHash, b) == HashBlock(HashBlock(rootHash, a), b) {
		t.Error("a block's hash ignores its parent")
	}
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := NewCache(3, 2)
	x, y, z, w := seq(10, 2), seq(20, 2), seq(30, 2), seq(40, 2)
	c.Insert(x)
	c.Insert(y)
	c.Insert(z)
	c.Lookup(x) // x is now more recent than y and z
	c.Insert(w) // evicts y, the least recently used
	if probe(c, y) != 0 {
		t.Error("y should have been evicted")
	}
	for name, s := range map[string][]int{"x": x, "z": z, "w": w} {
		if probe(c, s) != 2 {
			t.Errorf("%s was evicted", name)
		}
	}
	c.Insert(y) // now z is the oldest
	if probe(c, z) != 0 || probe(c, x) != 2 {
		t.Error("second eviction did not take z")
	}
	checkInvariants(t, c)
}

func TestCacheEvictsSequenceTailFirst(t *testing.T) {
	c := NewCache(3, 2)
	s := seq(10, 6) // 3 blocks
	c.Insert(s)
	c.Insert(seq(50, 2)) // one block needed: the tail of s goes
	if got := probe(c, s); got != 4 {
		t.Errorf("after evicting one block, s hits %d tokens, want 4 (head kept)", got)
	}
	checkInvariants(t, c)
}

func TestCacheNeverEvictsReferencedBlocks(t *testing.T) {
	c := NewCache(8, 4)
	tokens := seq(1, 16) // 4 blocks
	hashes := AppendBlockHashes(nil, tokens, 4)
	var s SeqBlocks
	if !c.Allocate(&s, 4) {
		t.Fatal("allocate failed on an empty pool")
	}
	c.Publish(&s, hashes)
	// Churn through far more than the free capacity.
	for i := 0; i < 50; i++ {
		c.Insert(seq(1000+i*37, 8))
		checkInvariants(t, c)
	}
	if hit, _ := c.Match(hashes); hit != 4 {
		t.Fatalf("referenced blocks evicted: %d of 4 still cached", hit)
	}
	if c.FreeBlocks() != 4 {
		t.Fatalf("free blocks %d, want 4", c.FreeBlocks())
	}
	var s2 SeqBlocks
	if c.Allocate(&s2, 5) {
		t.Fatal("allocated 5 blocks with 4 free")
	}
	if s2.Len() != 0 || c.FreeBlocks() != 4 {
		t.Fatal("a failed Allocate must allocate nothing")
	}
	// A second sequence sharing the prefix references the same blocks.
	var s3 SeqBlocks
	if hit, unref := c.Match(hashes); hit != 4 || unref != 0 {
		t.Fatalf("Match = %d,%d want 4,0", hit, unref)
	}
	c.Acquire(&s3, hashes)
	c.Release(&s)
	if c.FreeBlocks() != 4 {
		t.Fatalf("blocks still held by s3 were freed: free %d", c.FreeBlocks())
	}
	c.Release(&s3)
	if c.FreeBlocks() != 8 || c.Usage() != 0 {
		t.Fatalf("after releasing all: free %d usage %v", c.FreeBlocks(), c.Usage())
	}
	if hit, unref := c.Match(hashes); hit != 4 || unref != 4 {
		t.Fatalf("released blocks should stay cached and unreferenced: %d,%d", hit, unref)
	}
	checkInvariants(t, c)
}

func TestCacheRandomisedInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCache(40, 4)
	prefixes := [][]int{seq(1, 37), seq(100, 23), seq(300, 64)}
	var live []*SeqBlocks
	for i := 0; i < 3000; i++ {
		switch op := rng.IntN(4); {
		case op == 0 && len(live) > 0:
			j := rng.IntN(len(live))
			c.Release(live[j])
			live = append(live[:j], live[j+1:]...)
		case op == 1:
			p := prefixes[rng.IntN(len(prefixes))]
			c.Insert(cat(p[:rng.IntN(len(p))], seq(rng.IntN(5000), rng.IntN(20))))
		default:
			p := prefixes[rng.IntN(len(prefixes))]
			tokens := cat(p[:rng.IntN(len(p))], seq(rng.IntN(5000), rng.IntN(30)))
			hashes := AppendBlockHashes(nil, tokens, 4)
			hit, unref := c.Match(hashes)
			need := (len(tokens)+3)/4 - hit
			if need+unref > c.FreeBlocks() {
				continue
			}
			s := new(SeqBlocks)
			c.Acquire(s, hashes[:hit])
			if !c.Allocate(s, need) {
				t.Fatal("Allocate failed after the admission check")
			}
			c.Publish(s, hashes)
			live = append(live, s)
		}
		checkInvariants(t, c)
		held := 0
		for i := range c.blocks {
			if c.blocks[i].ref > 0 {
				held++
			}
		}
		if held+c.FreeBlocks() != c.Capacity() {
			t.Fatalf("held %d + free %d != capacity %d", held, c.FreeBlocks(), c.Capacity())
		}
	}
}

func TestTokenizeIsDeterministicAndCompositional(t *testing.T) {
	a := Tokenize("Hello, world! The cache's prefix: 42 tokens.")
	b := Tokenize("Hello, world! The cache's prefix: 42 tokens.")
	if len(a) != 13 {
		t.Fatalf("got %d tokens %v, want 13 (words and punctuation)", len(a), a)
	}
	for i := range a {
		if a[i] != b[i] || a[i] < 0 || a[i] >= VocabSize {
			t.Fatalf("token %d: %d vs %d", i, a[i], b[i])
		}
	}
	if got := Tokenize("  \n\t "); len(got) != 0 {
		t.Errorf("whitespace gave tokens %v", got)
	}
	x, y := "<|user|>\nhi there\n<|assistant|>\n", " the cache hit"
	joined := Tokenize(x + y)
	if want := cat(Tokenize(x), Tokenize(y)); len(joined) != len(want) {
		t.Fatalf("Tokenize(x+y) has %d tokens, Tokenize(x)+Tokenize(y) %d", len(joined), len(want))
	}
	for i, w := range outputWords {
		if ids := Tokenize(w); len(ids) != 1 || ids[0] != outputTokenIDs[i] {
			t.Errorf("output word %q is not one token", w)
		}
	}
	if got := Tokenize("naïve café"); len(got) != 2 {
		t.Errorf("unicode words: %v", got)
	}
}
