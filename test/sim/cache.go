package sim

// BlockHash identifies the content of one full KV block together with
// everything before it: hash(parent block's hash, this block's token ids).
// The chain is what makes a block reusable only after the very same prefix
// (vLLM: kv_cache_utils.hash_block_tokens, parent_block_hash + token ids).
type BlockHash uint64

// rootHash stands in for vLLM's NONE_HASH, the parent of a prompt's first
// block. vLLM seeds it randomly per process (or from PYTHONHASHSEED); a fixed
// value keeps every replica and the offline Cache agreeing on block identity.
const rootHash BlockHash = 0x6b76786473000001

// HashBlock returns the chained hash of one block of token ids. FNV-1a over
// the parent hash and the 32-bit token ids, then a 64-bit finaliser; vLLM uses
// SHA-256 (or Python's hash), but only equality matters here.
func HashBlock(parent BlockHash, tokens []int) BlockHash {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	p := uint64(parent)
	for i := 0; i < 8; i++ {
		h ^= p & 0xff
		h *= prime
		p >>= 8
	}
	for _, t := range tokens {
		v := uint32(t)
		for i := 0; i < 4; i++ {
			h ^= uint64(v & 0xff)
			h *= prime
			v >>= 8
		}
	}
	// splitmix64 finaliser: spreads FNV's weak high bits.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return BlockHash(h)
}

// AdapterRoot is the parent hash of the first block of a sequence run
// under a LoRA adapter ("" is the base model). The same tokens under
// different adapters have different KV, so they must never share a block:
// vLLM adds the adapter's name to every block's hash (its extra keys,
// kv_cache_utils.generate_block_hash_extra_keys); a root per adapter does
// the same for a chained hash.
func AdapterRoot(adapter string) BlockHash {
	if adapter == "" {
		return rootHash
	}
	tokens := make([]int, 0, len(adapter)+1)
	tokens = append(tokens, -1) // no token id is negative: never a base block
	for i := 0; i < len(adapter); i++ {
		tokens = append(tokens, int(adapter[i]))
	}
	return HashBlock(rootHash, tokens)
}

// AppendBlockHashes appends to dst the chained hashes of the full blocks of
// tokens that dst does not cover yet: dst[i] is the hash of block i, tokens
// [i*blockSize, (i+1)*blockSize). A trailing partial block gets no hash.
// Passing the previous result lets a growing sequence hash incrementally.
// The blocks are the base model's; AppendAdapterBlockHashes hashes those of
// an adapter.
func AppendBlockHashes(dst []BlockHash, tokens []int, blockSize int) []BlockHash {
	return AppendAdapterBlockHashes(dst, rootHash, tokens, blockSize)
}

// AppendAdapterBlockHashes is AppendBlockHashes for the blocks of a
// sequence whose first block's parent is root (AdapterRoot).
func AppendAdapterBlockHashes(dst []BlockHash, root BlockHash, tokens []int, blockSize int) []BlockHash {
	parent := root
	if len(dst) > 0 {
		parent = dst[len(dst)-1]
	}
	for i := len(dst); (i+1)*blockSize <= len(tokens); i++ {
		parent = HashBlock(parent, tokens[i*blockSize:(i+1)*blockSize])
		dst = append(dst, parent)
	}
	return dst
}

const nilBlock = -1

// kvBlock is one physical block of the pool.
type kvBlock struct {
	hash   BlockHash
	hashed bool  // hash is registered in Cache.byHash
	ref    int32 // running sequences holding the block
	// prev/next link the block in the free queue while ref == 0.
	prev, next int32
	inFree     bool
}

// Cache is a fixed pool of KV blocks with automatic prefix caching, modelled
// on vLLM V1's BlockPool and KVCacheManager:
//
//   - A block is identified by the chained hash of its tokens (BlockHash);
//     only full blocks are ever hashed, so a partial block never hits.
//   - Blocks referenced by running sequences are never evicted.
//   - Unreferenced blocks, cached or empty, sit in one free queue. New blocks
//     are taken from its front, evicting (un-hashing) a cached block if the
//     front one is cached; released blocks are appended at the back. That
//     makes eviction LRU over unreferenced blocks (vLLM FreeKVCacheBlockQueue).
//   - A sequence releases its blocks in reverse order, so its tail is evicted
//     before its head: shared prefixes survive longest (vLLM free_blocks).
//   - Capacity is fixed: cached plus referenced blocks never exceed it.
//
// Usage in vLLM's sense, 1 − free/total, counts cached-but-unreferenced
// blocks as free (BlockPool.get_usage).
//
// A Cache is not safe for concurrent use. Lookup and Insert are for offline
// analysis (an upper bound on hit rate for a trace); a replica's scheduler
// uses Match, Acquire, Allocate, Publish and Release.
type Cache struct {
	blockSize int
	blocks    []kvBlock
	byHash    map[BlockHash]int32
	// free queue: head is evicted first, tail is most recently released.
	head, tail int32
	numFree    int
}

// NewCache returns an empty pool of blocks blocks of blockSize tokens each.
func NewCache(blocks, blockSize int) *Cache {
	if blocks < 1 {
		blocks = 1
	}
	if blockSize < 1 {
		blockSize = 1
	}
	c := &Cache{
		blockSize: blockSize,
		blocks:    make([]kvBlock, blocks),
		byHash:    make(map[BlockHash]int32, blocks),
		head:      nilBlock,
		tail:      nilBlock,
	}
	for i := range c.blocks {
		c.blocks[i].prev, c.blocks[i].next = nilBlock, nilBlock
		c.pushBack(int32(i))
	}
	return c
}

// BlockSize is the number of tokens per block.
func (c *Cache) BlockSize() int { return c.blockSize }

// Capacity is the number of blocks in the pool.
func (c *Cache) Capacity() int { return len(c.blocks) }

// FreeBlocks is the number of unreferenced blocks: empty ones plus cached
// ones that may be evicted.
func (c *Cache) FreeBlocks() int { return c.numFree }

// CachedBlocks is the number of blocks that currently hold a hashed,
// reusable prefix block (referenced or not).
func (c *Cache) CachedBlocks() int { return len(c.byHash) }

// Usage is vLLM's kv_cache_usage_perc: 1 − free/total, in [0, 1].
func (c *Cache) Usage() float64 {
	return 1 - float64(c.numFree)/float64(len(c.blocks))
}

func (c *Cache) pushBack(i int32) {
	b := &c.blocks[i]
	b.prev, b.next, b.inFree = c.tail, nilBlock, true
	if c.tail == nilBlock {
		c.head = i
	} else {
		c.blocks[c.tail].next = i
	}
	c.tail = i
	c.numFree++
}

func (c *Cache) unlink(i int32) {
	b := &c.blocks[i]
	if b.prev == nilBlock {
		c.head = b.next
	} else {
		c.blocks[b.prev].next = b.next
	}
	if b.next == nilBlock {
		c.tail = b.prev
	} else {
		c.blocks[b.next].prev = b.prev
	}
	b.prev, b.next, b.inFree = nilBlock, nilBlock, false
	c.numFree--
}

// popFront takes the least recently released free block, evicting its
// cached content. The caller has checked numFree > 0.
func (c *Cache) popFront() int32 {
	i := c.head
	c.unlink(i)
	b := &c.blocks[i]
	if b.hashed {
		delete(c.byHash, b.hash)
		b.hashed = false
	}
	b.ref = 1
	return i
}

// Match reports how many leading hashes are cached (hitBlocks) and how many
// of those hits are unreferenced (they leave the free queue on Acquire, so
// admission must count them against free space, as vLLM's allocate_slots
// does). Match has no side effects.
func (c *Cache) Match(hashes []BlockHash) (hitBlocks, unrefHits int) {
	for _, h := range hashes {
		i, ok := c.byHash[h]
		if !ok {
			break
		}
		hitBlocks++
		if c.blocks[i].ref == 0 {
			unrefHits++
		}
	}
	return hitBlocks, unrefHits
}

// SeqBlocks is a running sequence's block table: the physical blocks holding
// its KV, in token order. The zero value is an empty table.
type SeqBlocks struct {
	ids []int32
	// published counts leading blocks already offered to the hash map.
	published int
}

// Len is the number of blocks the sequence holds.
func (s *SeqBlocks) Len() int { return len(s.ids) }

// Acquire references the cached blocks of hashes (normally the first
// hitBlocks hashes from Match) and appends them to s. It stops at the first
// hash that is not cached and returns the number of blocks acquired.
func (c *Cache) Acquire(s *SeqBlocks, hashes []BlockHash) int {
	n := 0
	for _, h := range hashes {
		i, ok := c.byHash[h]
		if !ok {
			break
		}
		b := &c.blocks[i]
		if b.ref == 0 {
			c.unlink(i)
		}
		b.ref++
		s.ids = append(s.ids, i)
		n++
	}
	if s.published == len(s.ids)-n {
		s.published = len(s.ids)
	}
	return n
}

// Allocate appends n fresh blocks to s, evicting least recently used
// unreferenced cached blocks as needed. It allocates nothing and returns
// false if fewer than n blocks are free.
func (c *Cache) Allocate(s *SeqBlocks, n int) bool {
	if n > c.numFree {
		return false
	}
	for ; n > 0; n-- {
		s.ids = append(s.ids, c.popFront())
	}
	return true
}

// Publish registers hashes[i] as the content of s's block i, for every block
// not yet published, up to min(len(hashes), s.Len()). vLLM does this when it
// schedules the tokens (allocate_slots → cache_blocks), so a request admitted
// later in the same step can already hit them. If another block already holds
// the same content, s's block stays unhashed: the duplicate is freed as empty.
func (c *Cache) Publish(s *SeqBlocks, hashes []BlockHash) {
	n := min(len(hashes), len(s.ids))
	for j := s.published; j < n; j++ {
		h := hashes[j]
		if _, dup := c.byHash[h]; dup {
			continue
		}
		i := s.ids[j]
		b := &c.blocks[i]
		if b.hashed {
			continue
		}
		b.hash, b.hashed = h, true
		c.byHash[h] = i
	}
	if n > s.published {
		s.published = n
	}
}

// Release drops s's references, last block first, and empties s. Blocks
// left unreferenced join the back of the free queue; hashed ones stay cached
// until evicted.
func (c *Cache) Release(s *SeqBlocks) {
	for j := len(s.ids) - 1; j >= 0; j-- {
		i := s.ids[j]
		b := &c.blocks[i]
		b.ref--
		if b.ref == 0 {
			c.pushBack(i)
		}
	}
	s.ids = s.ids[:0]
	s.published = 0
}

// Lookup returns how many leading tokens of tokens are served by cached full
// blocks (a multiple of the block size; a partial block never hits), and
// marks the hit blocks as recently used.
//
// The engine never lets the last prompt token hit (vLLM recomputes it to get
// logits: max_cache_hit_length = num_tokens − 1), so to reproduce a replica's
// vllm:prefix_cache_hits_total offline, look up tokens[:len(tokens)-1] and
// Insert the whole prompt.
func (c *Cache) Lookup(tokens []int) (hitTokens int) {
	return c.LookupAdapter("", tokens)
}

// LookupAdapter is Lookup for a sequence run under an adapter ("" is the
// base model): only blocks cached under the same adapter hit.
func (c *Cache) LookupAdapter(adapter string, tokens []int) (hitTokens int) {
	hashes := AppendAdapterBlockHashes(nil, AdapterRoot(adapter), tokens, c.blockSize)
	var s SeqBlocks
	n := c.Acquire(&s, hashes)
	c.Release(&s) // back of the queue, first block last: most recent
	return n * c.blockSize
}

// Insert caches every full block of tokens, as a sequence that just
// finished: blocks already cached are refreshed, the others take free blocks
// (evicting the least recently used). If the pool is too small for the whole
// prefix, only the blocks that fit are cached (a block is useless without its
// predecessors).
func (c *Cache) Insert(tokens []int) {
	c.InsertAdapter("", tokens)
}

// InsertAdapter is Insert for a sequence run under an adapter ("" is the
// base model).
func (c *Cache) InsertAdapter(adapter string, tokens []int) {
	hashes := AppendAdapterBlockHashes(nil, AdapterRoot(adapter), tokens, c.blockSize)
	var s SeqBlocks
	hit := c.Acquire(&s, hashes)
	if more := min(len(hashes)-hit, c.numFree); more > 0 {
		c.Allocate(&s, more)
	}
	c.Publish(&s, hashes)
	c.Release(&s)
}
