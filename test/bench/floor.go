package bench

import (
	"slices"

	"github.com/kvxds/kvxds/test/sim"
)

// SwapInFloor is the fewest adapter swap-ins any router could have over
// the measured requests reqs[warm:] of a fleet with slots adapter slots
// in all: a lower bound, which routing constraints, queues and the
// engines' own eviction only raise.
//
// A request can only avoid a swap-in where its adapter is loaded, so at
// any moment the adapters a fleet can serve without one are the union of
// its replicas' slots: at most slots adapters, one load each to grow it.
// However the router spreads them, the fleet is then no better than one
// cache of slots entries that loads on a miss, and no such cache misses
// less than Belady's MIN (evict the adapter whose next request is
// farthest away). The measured part may start from any loaded set: MIN
// from an empty cache minus the loads that fill it (the first slots
// distinct adapters, which a warm fleet may already hold) is still a
// bound, since any start can be reached from empty with that many loads.
// Base-model requests (no adapter) need no slot.
func SwapInFloor(reqs []Request, warm, slots int) int {
	if warm < 0 || warm > len(reqs) || slots < 1 {
		return 0
	}
	var seq []string
	for _, r := range reqs[warm:] {
		if r.Adapter != "" {
			seq = append(seq, r.Adapter)
		}
	}
	// next[i] is the index of the next request of seq[i]'s adapter.
	next := make([]int, len(seq))
	last := map[string]int{}
	for i := len(seq) - 1; i >= 0; i-- {
		next[i] = len(seq)
		if j, ok := last[seq[i]]; ok {
			next[i] = j
		}
		last[seq[i]] = i
	}
	// nextUse is each loaded adapter's next request.
	nextUse := make(map[string]int, slots)
	misses := 0
	for i, a := range seq {
		if _, ok := nextUse[a]; !ok {
			misses++
			if len(nextUse) == slots {
				victim, far := "", -1
				for b, n := range nextUse {
					if n > far || n == far && b < victim {
						victim, far = b, n
					}
				}
				delete(nextUse, victim)
			}
		}
		nextUse[a] = next[i]
	}
	return max(misses-min(slots, len(last)), 0)
}

// IdealPrefillTTFT is the prefill TTFT (simulated seconds) of the
// measured requests reqs[warm:] under an ideal router on replicas prefill
// replicas of blocks KV blocks each, as engines of cfg compute prompts: a
// router that knows the whole fleet's cache and when each replica frees.
// Each prompt computes only what one cache of all the replicas' blocks
// misses (PrefillUpperBound's hits), alone on its replica, in
// ceil(tokens / TokenBudget) steps of DecodeStepBase plus tokens at
// PrefillTokensPerSec; prompts start in arrival order, each on the
// replica that frees first, as from one queue the replicas pull from (a
// router binding a request late, when a replica has room, waits no longer
// than one that binds it at once). The KV transfer and the decode
// replica's first step come on top, and are left out. It is what routing
// alone can reach: no router of these replicas has a larger cache or a
// shorter queue, though engines that batch several short prompts in one
// step finish those a little sooner, so it is a reference, not a proof. Only an open-loop stream has one:
// where a request waits for another's reply (a conversation's turns), its
// arrival depends on the routing, and the quantiles are NaN.
func IdealPrefillTTFT(reqs []Request, warm, replicas, blocks int, cfg sim.Config) Quantiles {
	ttft := idealPrefillTimes(reqs, warm, replicas, blocks, cfg)
	if len(ttft) == 0 {
		return Quantiles{nan(), nan(), nan()}
	}
	return quantiles(ttft)
}

// idealPrefillTimes is each measured request's TTFT under
// IdealPrefillTTFT's router, in order; nil where it has none.
func idealPrefillTimes(reqs []Request, warm, replicas, blocks int, cfg sim.Config) []float64 {
	if !queueModel(reqs, warm, replicas, cfg) || !openLoop(reqs) {
		return nil
	}
	c := sim.NewCache(replicas*blocks, cfg.BlockSize)
	free := make([]float64, replicas) // when each replica frees, simulated seconds
	var ttft []float64
	for i, r := range reqs {
		t := sim.Tokenize(r.Prompt)
		if len(t) == 0 {
			continue
		}
		miss := max(len(t)-c.Lookup(t[:len(t)-1]), 1)
		c.Insert(t)
		service := prefillSeconds(miss, cfg)
		k := 0
		for j := range free {
			if free[j] < free[k] {
				k = j
			}
		}
		at := r.At.Seconds()
		free[k] = max(free[k], at) + service
		if i >= warm {
			ttft = append(ttft, free[k]-at)
		}
	}
	return ttft
}

// queueModel reports whether the queue model of IdealPrefillTTFT and
// ReplayPrefill applies: replicas to place on, a measured part, and an
// engine that computes prompts.
func queueModel(reqs []Request, warm, replicas int, cfg sim.Config) bool {
	return replicas >= 1 && warm >= 0 && warm < len(reqs) && cfg.TokenBudget >= 1 && cfg.PrefillTokensPerSec > 0 && cfg.BlockSize >= 1
}

// openLoop reports whether no request of reqs waits for another's reply,
// whose arrival would depend on the routing.
func openLoop(reqs []Request) bool {
	return !slices.ContainsFunc(reqs, func(r Request) bool { return r.DependsOn >= 0 })
}

// prefillSeconds is how long an engine of cfg computes miss prompt
// tokens alone: ceil(miss / TokenBudget) steps of DecodeStepBase, plus
// the tokens at PrefillTokensPerSec.
func prefillSeconds(miss int, cfg sim.Config) float64 {
	steps := (miss + cfg.TokenBudget - 1) / cfg.TokenBudget
	return float64(steps)*cfg.DecodeStepBase.Seconds() + float64(miss)/cfg.PrefillTokensPerSec
}
