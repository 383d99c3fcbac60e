package bench

import (
	"sync"
)

// IndexConfig is the approximate-index router's configuration, after
// SGLang's cache_aware policy (sgl-router/src/policies/cache_aware.rs,
// radix tree in sgl-router/src/tree.rs): the stateful per-request router
// kvxds is measured against.
type IndexConfig struct {
	// CacheThreshold is the smallest matched share of the prompt that
	// routes to the replica holding the longest match; at or below it the
	// request goes to the replica with the smallest tree.
	CacheThreshold float64
	// BalanceAbs and BalanceRel detect imbalance: when max-min in-flight
	// > BalanceAbs and max > BalanceRel × min, the request goes to the
	// least-loaded replica whatever the tree says.
	BalanceAbs int
	BalanceRel float64
	// MaxTreeSize caps each replica's share of the tree, in bytes; above
	// it that replica's least recently used leaves are evicted. 0: never.
	MaxTreeSize int
}

// DefaultIndexConfig is sglang-router's launch defaults (cache_threshold
// 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5, max_tree_size
// 2^26). SGLang evicts on a timer (every 120 s); the model evicts on
// insert, which only moves when eviction happens.
func DefaultIndexConfig() IndexConfig {
	return IndexConfig{CacheThreshold: 0.3, BalanceAbs: 64, BalanceRel: 1.5, MaxTreeSize: 1 << 26}
}

// indexNode is a radix-tree node: an edge of text, and the replicas that
// served text through it with the tick they last did.
type indexNode struct {
	edge     string
	parent   *indexNode
	children map[byte]*indexNode
	tenants  map[int]uint64
}

// IndexRouter is the approximate-index router: one radix tree over the
// prompt text (SGLang keeps characters, not tokens, to skip tokenizing)
// shared by all replicas, and in-flight counts per replica.
type IndexRouter struct {
	cfg                    IndexConfig
	mu                     sync.Mutex
	root                   *indexNode
	size                   []int  // bytes of tree text per replica
	load                   []int  // requests in flight per replica
	tick                   uint64 // logical clock for LRU
	hits, misses, balanced int
}

// NewIndexRouter returns a router over n replicas.
func NewIndexRouter(n int, cfg IndexConfig) *IndexRouter {
	return &IndexRouter{cfg: cfg, root: newIndexNode("", nil), size: make([]int, n), load: make([]int, n)}
}

func newIndexNode(edge string, parent *indexNode) *indexNode {
	return &indexNode{edge: edge, parent: parent, children: map[byte]*indexNode{}, tenants: map[int]uint64{}}
}

// Pick chooses the replica for a prompt, records it in the tree and counts
// the request in flight; Done ends it.
func (x *IndexRouter) Pick(text string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tick++
	minI, maxL := 0, x.load[0]
	for i, l := range x.load {
		if l < x.load[minI] {
			minI = i
		}
		maxL = max(maxL, l)
	}
	minL := x.load[minI]
	var pick int
	if maxL-minL > x.cfg.BalanceAbs && float64(maxL) > float64(minL)*x.cfg.BalanceRel {
		// Imbalanced: shortest queue; the tree still learns the text.
		pick = minI
		x.balanced++
	} else {
		matched, tenant := x.match(text)
		if len(text) > 0 && float64(matched)/float64(len(text)) > x.cfg.CacheThreshold {
			pick = tenant
			x.hits++
		} else {
			pick = x.smallest()
			x.misses++
		}
	}
	x.insert(text, pick)
	x.load[pick]++
	if x.cfg.MaxTreeSize > 0 && x.size[pick] > x.cfg.MaxTreeSize {
		x.evict(pick)
	}
	return pick
}

// Done ends a request Pick sent to replica i.
func (x *IndexRouter) Done(i int) {
	x.mu.Lock()
	x.load[i]--
	x.mu.Unlock()
}

// match returns the length of the longest prefix of text in the tree and
// the replica at its end. SGLang takes the first tenant of the deepest
// node's map; the model takes the most recently used, which is
// deterministic.
func (x *IndexRouter) match(text string) (int, int) {
	n, matched := x.root, 0
	for matched < len(text) {
		c := n.children[text[matched]]
		if c == nil {
			break
		}
		k := commonPrefix(c.edge, text[matched:])
		matched += k
		n = c // a partial edge still counts: c's tenants hold all of it
		if k < len(c.edge) {
			break
		}
	}
	best, bestT := -1, uint64(0)
	for t, at := range n.tenants {
		if best < 0 || at > bestT || at == bestT && t < best {
			best, bestT = t, at
		}
	}
	if best < 0 {
		return 0, 0
	}
	return matched, best
}

// smallest is the replica with the least tree text (the most cache room).
func (x *IndexRouter) smallest() int {
	s := 0
	for i, v := range x.size {
		if v < x.size[s] {
			s = i
		}
	}
	return s
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// insert records that replica t served text.
func (x *IndexRouter) insert(text string, t int) {
	n := x.root
	n.tenants[t] = x.tick
	for len(text) > 0 {
		c := n.children[text[0]]
		if c == nil {
			c = newIndexNode(text, n)
			n.children[text[0]] = c
			c.tenants[t] = x.tick
			x.size[t] += len(text)
			return
		}
		k := commonPrefix(c.edge, text)
		if k < len(c.edge) {
			// Split c at k: the new parent keeps c's tenants.
			mid := newIndexNode(c.edge[:k], n)
			for tt, at := range c.tenants {
				mid.tenants[tt] = at
			}
			c.edge, c.parent = c.edge[k:], mid
			mid.children[c.edge[0]] = c
			n.children[text[0]] = mid
			c = mid
		}
		if _, ok := c.tenants[t]; !ok {
			x.size[t] += len(c.edge)
		}
		c.tenants[t] = x.tick
		text = text[k:]
		n = c
	}
}

// evict drops replica t's least recently used leaves until its share of
// the tree is within MaxTreeSize (tree.rs: evict_tenant_by_size).
func (x *IndexRouter) evict(t int) {
	for x.size[t] > x.cfg.MaxTreeSize {
		var lru *indexNode
		var walk func(n *indexNode)
		walk = func(n *indexNode) {
			leaf := true
			for _, c := range n.children {
				if _, ok := c.tenants[t]; ok {
					leaf = false
					walk(c)
				}
			}
			if leaf && n != x.root && (lru == nil || n.tenants[t] < lru.tenants[t]) {
				lru = n
			}
		}
		walk(x.root)
		if lru == nil {
			return
		}
		delete(lru.tenants, t)
		x.size[t] -= len(lru.edge)
		if len(lru.tenants) == 0 && len(lru.children) == 0 {
			delete(lru.parent.children, lru.edge[0])
		}
	}
}

// Stats returns how many requests went by the tree, to the smallest tree,
// and to the least-loaded replica under imbalance.
func (x *IndexRouter) Stats() (hits, misses, balanced int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.hits, x.misses, x.balanced
}
