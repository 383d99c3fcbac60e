package bench

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"slices"
	"sync"
)

// LLMDConfig is the second index router's configuration, after llm-d's
// default scheduling profile (llm-d/llm-d-router):
//
//   - pkg/epp/config/loader/defaults.go: one profile of queue-scorer
//     (weight 2), kv-cache-utilization-scorer (2) and prefix-cache-scorer
//     (3); the max-score picker is added when none is named.
//   - pkg/epp/framework/plugins/scheduling/scorer/queuedepth/queue.go:
//     (maxQ − q) / (maxQ − minQ) over the endpoints' waiting queues
//     (vllm:num_requests_waiting), 1 for all when they are equal.
//   - pkg/epp/framework/plugins/scheduling/scorer/kvcacheutilization/
//     kvcache_utilization.go: 1 − KV-cache usage.
//   - pkg/epp/framework/plugins/scheduling/scorer/prefix/plugin.go:
//     matched / total blocks (prefixLengthWeight 0 by default).
//   - pkg/epp/framework/plugins/requestcontrol/dataproducer/
//     approximateprefix/{types,hashing,indexer,plugin}.go: the prompt cut
//     into blocks of 16 tokens × 4 characters, each block's hash chained
//     to the previous one's, at most 131,072 tokens; a block counts for
//     every endpoint holding it, from the first block on, until no
//     endpoint holds one; after each pick the chosen endpoint's LRU of
//     31,250 block hashes takes all of the request's blocks.
//   - pkg/epp/framework/plugins/scheduling/picker/maxscore/picker.go: the
//     highest weighted sum wins, equal scores in turn.
//
// With LoRAWeight, the profile also has llm-d's lora-affinity scorer
// (pkg/epp/framework/plugins/scheduling/scorer/loraaffinity/
// lora_affinity.go), reading each replica's vllm:lora_requests_info as
// the metrics extractor publishes it (the newest series' running and
// waiting adapters and max_lora): 1 where the request's model is running,
// else 0.8 where running plus waiting adapters are fewer than max_lora (a
// free slot), else 0.6 where it is waiting, else 0. vLLM writes its
// in-flight adapters into both labels, so an adapter in flight counts
// twice against max_lora, as it does in llm-d. The request's model (its
// adapter, or the base model) also seeds the prefix index's hash chain, as
// llm-d's approximate prefix hashing does with the target model.
//
// The model leaves out what the default profile adds around the scoring
// (flow control, the saturation detector's admission) and, with
// autoTune, the block size raised to 64 tokens and the LRU sized from
// the engine's own block count by newer versions: the block size and
// capacity here are the documented 16 and 31,250.
type LLMDConfig struct {
	// QueueWeight, KVWeight and PrefixWeight weight the three scores.
	QueueWeight, KVWeight, PrefixWeight float64
	// BlockTokens is the prefix index's block in tokens, CharsPerToken
	// its estimate of characters per token: a block is BlockTokens ×
	// CharsPerToken bytes of prompt.
	BlockTokens, CharsPerToken int
	// MaxPrefixTokens caps the blocks indexed per request
	// (MaxPrefixTokens / BlockTokens).
	MaxPrefixTokens int
	// LRUCapacity is each replica's number of block hashes.
	LRUCapacity int
	// LoRAWeight weights the lora-affinity score; 0 leaves the scorer
	// out (llm-d's default profile). DefaultLLMDLoRAWeight is the weight
	// llm-d gives a scorer added to a profile without one.
	LoRAWeight float64
}

// DefaultLLMDLoRAWeight is the lora-affinity scorer's weight in
// IndexLLMDLoRA: llm-d's DefaultScorerWeight (pkg/epp/config/loader/
// defaults.go), which a scorer named in a profile without a weight gets;
// the default profile itself has no lora-affinity scorer.
const DefaultLLMDLoRAWeight = 1.0

// LoRAState is a replica's vllm:lora_requests_info as llm-d reads it:
// the newest series' running_lora_adapters, waiting_lora_adapters and
// max_lora.
type LoRAState struct {
	Running, Waiting []string
	MaxLoRA          int
}

// loraAffinity is llm-d's lora-affinity score of a replica in state s for
// a request under model.
func loraAffinity(s LoRAState, model string) float64 {
	switch {
	case slices.Contains(s.Running, model):
		return 1
	case len(s.Running)+len(s.Waiting) < s.MaxLoRA:
		return 0.8
	case slices.Contains(s.Waiting, model):
		return 0.6
	}
	return 0
}

// DefaultLLMDConfig is llm-d's default profile.
func DefaultLLMDConfig() LLMDConfig {
	return LLMDConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3,
		BlockTokens: 16, CharsPerToken: 4, MaxPrefixTokens: 131072, LRUCapacity: 31250}
}

// LLMDRouter is the llm-d-style router: a shared block-hash index with an
// LRU per replica, and the replicas' waiting queues and KV usage read from
// the engines at each pick (llm-d scrapes them every 50 ms; the model reads
// them live).
type LLMDRouter struct {
	cfg LLMDConfig
	// stats reads replica i's waiting requests and KV-cache usage.
	stats func(i int) (waiting int, kvUsage float64)
	// lora reads replica i's adapters (WithLoRA); nil without the
	// lora-affinity scorer.
	lora func(i int) LoRAState

	mu      sync.Mutex
	n       int
	holders map[uint64]map[int]struct{} // block hash → replicas holding it
	lru     []*blockLRU
	turn    uint64 // the picker's rotation among equal scores
	// matched and blocks count the prefix matches of the chosen replicas
	// against all blocks, over all picks.
	matched, blocks int
}

// NewLLMDRouter returns a router over n replicas whose metrics stats
// reads.
func NewLLMDRouter(n int, cfg LLMDConfig, stats func(i int) (int, float64)) *LLMDRouter {
	x := &LLMDRouter{cfg: cfg, stats: stats, n: n, holders: map[uint64]map[int]struct{}{}}
	for i := range n {
		x.lru = append(x.lru, newBlockLRU(cfg.LRUCapacity, func(h uint64) {
			if s := x.holders[h]; s != nil {
				delete(s, i)
				if len(s) == 0 {
					delete(x.holders, h)
				}
			}
		}))
	}
	return x
}

// WithLoRA adds the lora-affinity scorer (weight cfg.LoRAWeight), which
// reads replica i's adapters with lora, and returns x.
func (x *LLMDRouter) WithLoRA(lora func(i int) LoRAState) *LLMDRouter {
	x.lora = lora
	return x
}

// blockHashes cuts a prompt into blocks and chains their hashes, the
// first one onto the model's hash (none for "").
func (x *LLMDRouter) blockHashes(prompt, model string) []uint64 {
	size := x.cfg.BlockTokens * x.cfg.CharsPerToken
	limit := x.cfg.MaxPrefixTokens / x.cfg.BlockTokens
	var out []uint64
	var prev [8]byte
	if model != "" {
		h := fnv.New64a()
		h.Write([]byte(model))
		binary.LittleEndian.PutUint64(prev[:], h.Sum64())
	}
	for i := 0; i < len(prompt) && len(out) < limit; i += size {
		h := fnv.New64a()
		h.Write(prev[:])
		h.Write([]byte(prompt[i:min(i+size, len(prompt))]))
		s := h.Sum64()
		out = append(out, s)
		binary.LittleEndian.PutUint64(prev[:], s)
	}
	return out
}

// Scores returns each replica's weighted score for a prompt, and the
// prompt's block hashes and per-replica matches.
func (x *LLMDRouter) scores(hashes []uint64, model string) (score []float64, match []int) {
	match = make([]int, x.n)
	for _, h := range hashes {
		s := x.holders[h]
		if len(s) == 0 {
			break
		}
		for i := range s {
			match[i]++
		}
	}
	waiting := make([]int, x.n)
	usage := make([]float64, x.n)
	minQ, maxQ := 0, 0
	for i := range x.n {
		waiting[i], usage[i] = x.stats(i)
		if i == 0 || waiting[i] < minQ {
			minQ = waiting[i]
		}
		maxQ = max(maxQ, waiting[i])
	}
	score = make([]float64, x.n)
	for i := range x.n {
		q := 1.0
		if maxQ != minQ {
			q = float64(maxQ-waiting[i]) / float64(maxQ-minQ)
		}
		p := 0.0
		if len(hashes) > 0 {
			p = float64(match[i]) / float64(len(hashes))
		}
		score[i] = x.cfg.QueueWeight*q + x.cfg.KVWeight*(1-usage[i]) + x.cfg.PrefixWeight*p
		if x.lora != nil {
			score[i] += x.cfg.LoRAWeight * loraAffinity(x.lora(i), model)
		}
	}
	return score, match
}

// Pick chooses the replica with the highest score (equal scores in turn)
// and adds the prompt's blocks to its LRU.
func (x *LLMDRouter) Pick(prompt string) int { return x.PickModel(prompt, "") }

// PickModel is Pick for a request naming model (an adapter or the base
// model; "" names none), which the lora-affinity scorer looks for and the
// prefix index's hashes start from.
func (x *LLMDRouter) PickModel(prompt, model string) int {
	hashes := x.blockHashes(prompt, model)
	x.mu.Lock()
	defer x.mu.Unlock()
	score, match := x.scores(hashes, model)
	best := score[0]
	for _, s := range score {
		best = max(best, s)
	}
	var tied []int
	for i, s := range score {
		if s == best {
			tied = append(tied, i)
		}
	}
	pick := tied[x.turn%uint64(len(tied))]
	x.turn++
	x.matched += match[pick]
	x.blocks += len(hashes)
	x.commit(hashes, pick)
	return pick
}

// commit records that replica i holds the blocks.
func (x *LLMDRouter) commit(hashes []uint64, i int) {
	for _, h := range hashes {
		x.lru[i].add(h)
		s := x.holders[h]
		if s == nil {
			s = map[int]struct{}{}
			x.holders[h] = s
		}
		s[i] = struct{}{}
	}
}

// Done is a no-op: the llm-d scorers read the engines, not requests in
// flight.
func (x *LLMDRouter) Done(int) {}

// Matched returns the blocks the chosen replicas matched and the blocks
// of all picks.
func (x *LLMDRouter) Matched() (matched, blocks int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.matched, x.blocks
}

// blockLRU is a fixed-capacity LRU set of block hashes that reports
// evictions.
type blockLRU struct {
	cap   int
	order *list.List // front: most recent
	at    map[uint64]*list.Element
	evict func(uint64)
}

func newBlockLRU(capacity int, evict func(uint64)) *blockLRU {
	return &blockLRU{cap: max(capacity, 1), order: list.New(), at: map[uint64]*list.Element{}, evict: evict}
}

func (l *blockLRU) add(h uint64) {
	if e, ok := l.at[h]; ok {
		l.order.MoveToFront(e)
		return
	}
	l.at[h] = l.order.PushFront(h)
	if l.order.Len() > l.cap {
		e := l.order.Back()
		old := e.Value.(uint64)
		l.order.Remove(e)
		delete(l.at, old)
		l.evict(old)
	}
}
