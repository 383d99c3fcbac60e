package bench

import (
	"container/heap"
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
	// (ReplayRule.Factor of its share of the mean); a key not placed
	// before goes to its own replica, or the next ones' in an order its
	// hash gives (as a slot table's next slots), under its share of the
	// mean (NEW_FACTOR 100).
	PlaceSlot
	// PlaceSampled is PlaceSlot, but a key not placed before goes to a
	// replica drawn by its hash with odds in proportion to the replica's
	// room under the mean.
	PlaceSampled
	// PlaceLeastOfThree is PlaceSlot, but a key not placed before goes
	// to the least loaded of the first three replicas of its order.
	PlaceLeastOfThree
	// PlaceFewestSent is PlaceSlot, but a key not placed before goes to
	// the replica sent the fewest uncached prompt tokens so far, as the
	// router sees the others' (the index router's smallest tree, counted
	// by key).
	PlaceFewestSent
	// PlaceIndex is the index router's own rule (IndexRouter at
	// DefaultIndexConfig, one router seeing every prompt).
	PlaceIndex
)

// ReplayFactor is the bound PlaceSlot keeps a placed key under by
// default: the prefill pool's balance_factor for a prompt_prefix key.
const ReplayFactor = 250

// ReplayRule is one way of placing prompts in ReplayPrefill.
type ReplayRule struct {
	Place Placement
	// Left counts, of each prompt placed and not yet computed, what is
	// left to compute; otherwise the whole prompt counts until it is.
	Left bool
	// Routers place the requests in turn (request i by router i mod
	// Routers; with Sticky, a key's requests by the router of its
	// first). Each sees every prompt placed before its request's batch
	// (the requests arriving at the same moment) and those of the batch
	// it placed itself, not the others': routers in separate Envoys that
	// learn of each other's prompts from a table. One router sees
	// everything.
	Routers int
	Sticky  bool
	// Table, where positive, is how often the routers learn of each
	// other's prompts (simulated seconds): each sees the others' as they
	// were at the last multiple of Table, and its own as they are.
	Table float64
	// Factor bounds a placed key (percent of its share of the mean);
	// 0 is ReplayFactor.
	Factor float64
	// Replace places a key's request as a new key's where the replica
	// its last prompt went to holds no more than this share of it (the
	// index router's cache_threshold); 0 never.
	Replace float64
}

// ReplayPrefill is each measured request's prefill TTFT (simulated
// seconds) when the prompts of reqs are placed by rule on replicas
// prefill replicas of blocks KV blocks each, as engines of cfg compute
// them: each replica's own cache, prompts computed one after another in
// the order they reach it, each in ceil(tokens / TokenBudget) steps of
// DecodeStepBase plus tokens at PrefillTokensPerSec (IdealPrefillTTFT's
// model, a cache per replica). A prompt's load is its uncached tokens
// (with Left, less what its replica has computed of it). A request that
// waits for another's reply arrives at its time or once that reply is
// done, whichever is later: the prompt computed, its KV moved
// (TransferPerToken a token) and its MaxTokens decoded a DecodeStepBase
// each, on decode replicas that never queue. It models the queues, not
// the engines: a guide to what a rule costs, not a bound.
func ReplayPrefill(reqs []Request, warm, replicas, blocks int, cfg sim.Config, rule ReplayRule) []float64 {
	if !queueModel(reqs, warm, replicas, cfg) {
		return nil
	}
	routers := max(rule.Routers, 1)
	factor := rule.Factor
	if factor <= 0 {
		factor = ReplayFactor
	}
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
	routerOf := map[string]int{}      // each key's router (Sticky)
	// Uncached tokens sent to each replica: by every router, by each, and
	// both as they were at the last table.
	sent, tableSent := make([]float64, replicas), make([]float64, replicas)
	own, ownAt := make([][]float64, routers), make([][]float64, routers)
	for k := range own {
		own[k], ownAt[k] = make([]float64, replicas), make([]float64, replicas)
	}
	table := -1.0
	var index *IndexRouter
	if rule.Place == PlaceIndex {
		index = NewIndexRouter(replicas, DefaultIndexConfig())
	}
	// The requests in the order they arrive: a dependent one once its
	// dependency's reply is done.
	deps := map[int][]int{}
	ready := &replayQueue{}
	for i, r := range reqs {
		if r.DependsOn >= 0 && r.DependsOn < len(reqs) {
			deps[r.DependsOn] = append(deps[r.DependsOn], i)
		} else {
			heap.Push(ready, replayEvent{r.At.Seconds(), i})
		}
	}
	next := 0
	var ttft []float64
	// load is each replica's load at t as router k sees it: its own
	// prompts, and the others' placed before its view (before t, or at
	// the last table) and not computed by then.
	load := func(k int, t float64) []float64 {
		l := make([]float64, replicas)
		at := t
		if rule.Table > 0 {
			at = table
		}
		for _, o := range open {
			if o.end <= t {
				continue
			}
			if o.router != k && (o.sent > at || o.sent == t && rule.Table <= 0 || o.end <= at) {
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
	// sentTo is the uncached tokens sent to each replica as router k
	// sees them at t.
	sentTo := func(k int, t float64) []float64 {
		v := make([]float64, replicas)
		for j := range v {
			if rule.Table > 0 {
				v[j] = tableSent[j] + own[k][j] - ownAt[k][j]
			} else {
				v[j] = sent[j]
			}
		}
		if rule.Table <= 0 {
			// Not the others' of this instant.
			for _, o := range open {
				if o.sent == t && o.router != k {
					v[o.replica] -= o.tokens
				}
			}
		}
		return v
	}
	for ready.Len() > 0 {
		e := heap.Pop(ready).(replayEvent)
		i, t := e.i, e.t
		r := reqs[i]
		toks := sim.Tokenize(r.Prompt)
		if len(toks) == 0 {
			continue
		}
		if at := math.Floor(t/rule.Table) * rule.Table; rule.Table > 0 && at > table {
			// A new table: every prompt placed so far, as of now.
			table = at
			copy(tableSent, sent)
			for k := range own {
				copy(ownAt[k], own[k])
			}
		}
		keep := t - max(rule.Table, 0)
		open = slices.DeleteFunc(open, func(o placed) bool { return o.end <= keep })
		miss := make([]float64, replicas)
		for k := range miss {
			miss[k] = float64(max(len(toks)-caches[k].Lookup(toks[:len(toks)-1]), 1))
		}
		service := func(k int) float64 { return prefillSeconds(int(miss[k]), cfg) }
		router := i % routers
		if rule.Sticky && r.Session != "" {
			k, ok := routerOf[r.Session]
			if !ok {
				k = len(routerOf) % routers
				routerOf[r.Session] = k
			}
			router = k
		}
		if k, ok := went[r.Session]; ok && rule.Replace > 0 && float64(len(toks))-miss[k] <= rule.Replace*float64(len(toks)) {
			delete(went, r.Session)
		}
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
		case PlaceIndex:
			pick = index.Pick(r.Prompt)
		default:
			var fewest []float64
			if rule.Place == PlaceFewestSent {
				fewest = sentTo(router, t)
			}
			pick = replaySlot(rule.Place, r.Session, float64(len(toks)), load(router, t), went, factor, fewest)
		}
		went[r.Session] = pick
		start := math.Max(free[pick], t)
		free[pick] = start + service(pick)
		caches[pick].Insert(toks)
		sent[pick] += miss[pick]
		own[router][pick] += miss[pick]
		open = append(open, placed{replica: pick, router: router, sent: t, start: start, end: free[pick], tokens: miss[pick]})
		if index != nil {
			index.Done(pick) // its load only weighs under imbalance, which needs 64 in flight
		}
		if i >= warm {
			ttft = append(ttft, free[pick]-t)
		}
		done := free[pick] + float64(len(toks))*cfg.TransferPerToken.Seconds() + float64(r.MaxTokens)*cfg.DecodeStepBase.Seconds()
		for _, j := range deps[i] {
			heap.Push(ready, replayEvent{math.Max(reqs[j].At.Seconds(), done), j})
		}
	}
	return ttft
}

// replayEvent is request i arriving at t (simulated seconds);
// replayQueue orders them by time, then by index.
type replayEvent struct {
	t float64
	i int
}

type replayQueue []replayEvent

func (q replayQueue) Len() int { return len(q) }
func (q replayQueue) Less(a, b int) bool {
	return q[a].t < q[b].t || q[a].t == q[b].t && q[a].i < q[b].i
}
func (q replayQueue) Swap(a, b int) { q[a], q[b] = q[b], q[a] }
func (q *replayQueue) Push(x any)   { *q = append(*q, x.(replayEvent)) }
func (q *replayQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// replaySlot places a prompt of w tokens with key under the slot rules
// (PlaceSlot, PlaceSampled, PlaceLeastOfThree, PlaceFewestSent), given
// each replica's load, where each key went last, the bound on a placed
// key and (PlaceFewestSent) the uncached tokens sent to each replica.
func replaySlot(place Placement, key string, w float64, load []float64, went map[string]int, factor float64, sent []float64) int {
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
		if !over(k, factor) {
			return k
		}
		for _, k := range order {
			if !over(k, factor) {
				return k
			}
		}
		return order[0]
	}
	switch place {
	case PlaceFewestSent:
		pick := order[0]
		for _, k := range order[1:] {
			if sent[k] < sent[pick] {
				pick = k
			}
		}
		return pick
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
