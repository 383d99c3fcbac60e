package bench

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
