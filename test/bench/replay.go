package bench

import (
	"hash/fnv"
	"math"
	"slices"

	"github.com/kvxds/kvxds/test/sim"
)

// Placement is how ReplayPrefill's routers place a prompt.
type Placement int

const (
	// PlaceTurn sends prompts to the replicas in turn (round robin).
	PlaceTurn Placement = iota
	// PlaceEarliest sends each prompt to the replica that computes it
	// first, its cache and queue known exactly (the ideal router).
	PlaceEarliest
	// PlaceLeast sends each prompt to the least loaded replica.
	PlaceLeast
	// PlaceSlot is the prefill filter's rule: a key goes back to the
	// replica its last prompt went to while that one is under the bound
	// (ReplayFactor of its share of the mean); a key not placed before
	// goes to its own replica, or the next ones' in an order its hash
	// gives (as a slot table's next slots), under its share of the mean
	// (NEW_FACTOR 100).
	PlaceSlot
	// PlaceSampled is PlaceSlot, but a key not placed before goes to a
	// replica drawn by its hash with odds in proportion to the replica's
	// room under the mean.
	PlaceSampled
	// PlaceLeastOfThree is PlaceSlot, but a key not placed before goes
	// to the least loaded of the first three replicas of its order.
	PlaceLeastOfThree
)

// ReplayFactor is the bound PlaceSlot keeps a placed key under: the
// prefill pool's balance_factor for a prompt_prefix key.
const ReplayFactor = 250

// ReplayRule is one way of placing prompts in ReplayPrefill.
type ReplayRule struct {
	Place Placement
	// Left counts, of each prompt placed and not yet computed, what is
	// left to compute; otherwise the whole prompt counts until it is.
	Left bool
	// Routers place the requests in turn (request i by router i mod
	// Routers). Each sees every prompt placed before its request's batch
	// (the requests arriving at the same moment) and those of the batch
	// it placed itself, not the others': routers in separate Envoys that
	// learn of each other's prompts from a table. One router sees
	// everything.
	Routers int
}

// ReplayPrefill is each measured request's prefill TTFT (simulated
// seconds) when the prompts of reqs, an open-loop stream, are placed by
// rule on replicas prefill replicas of blocks KV blocks each, as engines
// of cfg compute them: each replica's own cache, prompts computed one
// after another in the order they reach it, each in ceil(tokens /
// TokenBudget) steps of DecodeStepBase plus tokens at
// PrefillTokensPerSec (IdealPrefillTTFT's model, a cache per replica).
// A prompt's load is its uncached tokens (with Left, less what its
// replica has computed of it). It models the queues, not the engines:
// a guide to what a rule costs, not a bound. Nil where a request waits
// for another's reply.
func ReplayPrefill(reqs []Request, warm, replicas, blocks int, cfg sim.Config, rule ReplayRule) []float64 {
	if !queueModel(reqs, warm, replicas, cfg) {
		return nil
	}
	routers := max(rule.Routers, 1)
	rate := cfg.PrefillTokensPerSec
	caches := make([]*sim.Cache, replicas)
	for i := range caches {
		caches[i] = sim.NewCache(blocks, cfg.BlockSize)
	}
	type placed struct {
		replica, router int
		sent            float64 // when it was placed
		start, end      float64 // when its replica computes it
		tokens          float64 // uncached
	}
	var open []placed
	free := make([]float64, replicas) // when each replica frees
	went := map[string]int{}          // where each key's last prompt went
	next := 0
	var ttft []float64
	// load is each replica's load at t as router k sees it: every prompt
	// placed before t, and its own placed at t.
	load := func(k int, t float64) []float64 {
		l := make([]float64, replicas)
		for _, o := range open {
			if o.end <= t || o.sent == t && o.router != k {
				continue
			}
			if rule.Left {
				l[o.replica] += math.Max(o.tokens-math.Max(t-o.start, 0)*rate, 0)
			} else {
				l[o.replica] += o.tokens
			}
		}
		return l
	}
	for i, r := range reqs {
		toks := sim.Tokenize(r.Prompt)
		if len(toks) == 0 {
			continue
		}
		t := r.At.Seconds()
		open = slices.DeleteFunc(open, func(o placed) bool { return o.end <= t })
		miss := make([]float64, replicas)
		for k := range miss {
			miss[k] = float64(max(len(toks)-caches[k].Lookup(toks[:len(toks)-1]), 1))
		}
		service := func(k int) float64 { return prefillSeconds(int(miss[k]), cfg) }
		router := i % routers
		var pick int
		switch rule.Place {
		case PlaceTurn:
			pick, next = next, (next+1)%replicas
		case PlaceEarliest:
			best := math.Inf(1)
			for k := range replicas {
				if f := math.Max(free[k], t) + service(k); f < best {
					best, pick = f, k
				}
			}
		case PlaceLeast:
			l := load(router, t)
			for k := range l {
				if l[k] < l[pick] {
					pick = k
				}
			}
		default:
			pick = replaySlot(rule.Place, r.Session, float64(len(toks)), load(router, t), went)
		}
		went[r.Session] = pick
		start := math.Max(free[pick], t)
		free[pick] = start + service(pick)
		caches[pick].Insert(toks)
		open = append(open, placed{replica: pick, router: router, sent: t, start: start, end: free[pick], tokens: miss[pick]})
		if i >= warm {
			ttft = append(ttft, free[pick]-t)
		}
	}
	return ttft
}

// replaySlot places a prompt of w tokens with key under the slot rules
// (PlaceSlot, PlaceSampled, PlaceLeastOfThree), given each replica's load
// and where each key went last.
func replaySlot(place Placement, key string, w float64, load []float64, went map[string]int) int {
	n := len(load)
	order, hv := replayOrder(key, n)
	all := 0.0
	for _, l := range load {
		all += l
	}
	over := func(k int, factor float64) bool {
		return load[k] > math.Max((all+w)*factor/100/float64(n), w)
	}
	if k, ok := went[key]; ok {
		if !over(k, ReplayFactor) {
			return k
		}
		for _, k := range order {
			if !over(k, ReplayFactor) {
				return k
			}
		}
		return order[0]
	}
	switch place {
	case PlaceSampled:
		mean := (all + w) / float64(n)
		room := 0.0
		for _, l := range load {
			room += math.Max(mean-l, 0)
		}
		if room > 0 {
			u := float64(hv>>11) / (1 << 53) * room
			for k, l := range load {
				if u -= math.Max(mean-l, 0); u < 0 {
					return k
				}
			}
		}
	case PlaceLeastOfThree:
		pick := order[0]
		for _, k := range order[1:min(3, n)] {
			if load[k] < load[pick] {
				pick = k
			}
		}
		if !over(pick, 100) {
			return pick
		}
	}
	for _, k := range order {
		if !over(k, 100) {
			return k
		}
	}
	return order[0]
}

// replayOrder is key's order of n replicas, a permutation its hash
// seeds (as a slot table's next slots give), and the hash.
func replayOrder(key string, n int) ([]int, uint64) {
	h := fnv.New64a()
	h.Write([]byte(key))
	hv := h.Sum64()
	order := make([]int, n)
	for k := range order {
		order[k] = k
	}
	s := hv
	for j := n - 1; j > 0; j-- {
		s = s*6364136223846793005 + 1442695040888963407
		m := int(s>>33) % (j + 1)
		order[j], order[m] = order[m], order[j]
	}
	return order, hv
}
