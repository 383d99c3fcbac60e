package hotkeys

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/kvxds/kvxds/fleet"
)

// MinRequests is the decayed count of requests a sketch needs before it
// decides: below it one request would be a large share, so the previous
// table stays.
const MinRequests = 64

// Decide returns the pool's hot-key table as of now, from the sketch,
// the pool's healthy replicas, its settings and the table it serves
// (previous), sorted by key index and value:
//
//   - a key enters at a share of at least the settings' Share (zero: one
//     replica's fair share, 1 / healthy) and leaves only below half of
//     it, so a key near the threshold does not flap;
//   - its spread is Spread(share, healthy), or with home twice that
//     where its buckets land better (a key keeps the one it had while
//     that is either); an entry whose spread did not change is kept as
//     it was, so the table changes only when a key enters, leaves or
//     changes level;
//   - with home (nil: none of this), a key whose replica carries more
//     than Crowd × one replica's fair share of the requests also enters,
//     the largest of that replica's keys first, if its share is at least
//     a quarter of enter (MinCrowd), over 2 to 8 buckets (crowded):
//     consistent hashing puts several large keys on one replica as balls
//     in bins, which no key's share alone shows; one so entered stays
//     while its share is at least half of that;
//   - at most settings.Max keys, the highest shares first, ties by key
//     and value.
//
// Without traffic since the last decision, or with less than MinRequests
// observed, the previous table stays: a table decays out only through
// traffic observed, never because logs stopped (fail static).
func (s *Sketch) Decide(now time.Time, healthy int, settings *fleet.HotKeys, previous []fleet.HotKey, home Home) []fleet.HotKey {
	if settings == nil {
		return nil
	}
	s.mu.Lock()
	observed := s.observed
	s.observed = 0
	total := s.total * s.decay(now)
	if observed == 0 || total < MinRequests || healthy <= 0 {
		s.mu.Unlock()
		return previous
	}
	enter := settings.Share
	if enter <= 0 {
		enter = 1 / float64(healthy)
	}
	floor := enter / 2
	if home != nil {
		floor = 0 // every key counts in its replica's load
	}
	est := s.sharesLocked(floor)
	s.mu.Unlock()
	slices.SortFunc(est, func(a, b Estimate) int { return compareID(a.ID, b.ID) })

	prev := make(map[ID]fleet.HotKey, len(previous))
	for _, hk := range previous {
		prev[ID{hk.Key, hk.Value}] = hk
	}
	var cand []choice
	for _, e := range est {
		p, was := prev[e.ID]
		if e.Share >= enter || was && p.Spread > MaxCrowdSpread && e.Share >= enter/2 {
			cand = append(cand, choice{e, Spread(e.Share, healthy)})
		}
	}
	// The highest shares first, at most settings.Max: the keys the table
	// keeps, before and after the crowded replicas' keys join them.
	keep := func() {
		slices.SortFunc(cand, func(a, b choice) int {
			return cmp.Or(cmp.Compare(b.Share, a.Share), compareID(a.ID, b.ID))
		})
		if settings.Max > 0 && len(cand) > settings.Max {
			cand = cand[:settings.Max]
		}
	}
	keep()
	if home != nil {
		cand = crowded(est, cand, prev, enter, healthy, settings.Max, home)
		keep()
	}
	out := make([]fleet.HotKey, 0, len(cand))
	for _, c := range cand {
		if p, ok := prev[c.ID]; ok && p.Spread == c.spread {
			out = append(out, p)
			continue
		}
		out = append(out, fleet.HotKey{Key: c.Key, Value: c.Value, Share: round(c.Share), Spread: c.spread})
	}
	slices.SortFunc(out, func(a, b fleet.HotKey) int {
		return compareID(ID{a.Key, a.Value}, ID{b.Key, b.Value})
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// Home says which replica a key's requests go to (an index of the
// pool's replicas), -1 if that is not known or the replica is out of
// the table: with spread below 2 while the key is not hot, else those of
// its bucket (0 to spread-1) while it is hot with that spread.
type Home func(id ID, spread, bucket int) int

// Crowd is how far above one replica's fair share of the keyed requests
// the keys that hash to a replica may carry before its largest ones are
// spread (Decide).
const Crowd = 1.2

// MinCrowd is the smallest key Decide spreads for its replica's sake, as
// a fraction of the share at which a key is hot by itself: smaller keys
// move too little to be worth the prefix they warm elsewhere.
const MinCrowd = 0.25

// CrowdSpread is the least spread of a key spread for its replica's
// sake: two buckets, so that the key's prefix is warm on one more
// replica (every bucket is one more copy in the caches, which the
// replicas' other keys pay for in evictions). Spreads for a share are at
// least 16 (SpreadPerReplica), above MaxCrowdSpread, so an entry's spread
// says why it is in the table.
const CrowdSpread = 2

// MaxCrowdSpread is the most buckets a key spread for its replica's sake
// gets: where its two buckets land on busy replicas, more may land better
// (bestSpread).
const MaxCrowdSpread = 8

// choice is a key Decide puts in the table, with its spread.
type choice struct {
	Estimate
	spread int
}

// crowded adds to cand (the keys hot by their share, or kept) the keys
// spread for their home replica's sake, from est (every key tracked,
// sorted by ID): a key kept from the previous table for that reason
// stays while its share is at least half of MinCrowd × enter; then,
// while some replica carries more than Crowd / healthy of the requests,
// that replica's largest key of at least MinCrowd × enter is spread over
// CrowdSpread to MaxCrowdSpread buckets (bestSpread), until cand holds
// maxKeys keys (none: no limit), as many as the table keeps. A replica's load is the share of the keys that
// hash to it, and of the hot keys' buckets that do (each a 1/spread of
// its key: buckets land unevenly, as balls in bins); the requests of
// keys not tracked count as landing evenly.
func crowded(est []Estimate, cand []choice, prev map[ID]fleet.HotKey, enter float64, healthy, maxKeys int, home Home) []choice {
	hot := make(map[ID]bool, len(cand))
	for _, c := range cand {
		hot[c.ID] = true
	}
	for _, e := range est {
		if p, was := prev[e.ID]; was && p.Spread <= MaxCrowdSpread && !hot[e.ID] && e.Share >= enter*MinCrowd/2 {
			hot[e.ID] = true
			cand = append(cand, choice{e, p.Spread})
		}
	}
	load := map[int]float64{}
	spreadOver := func(c choice) {
		for b := range c.spread {
			if r := home(c.ID, c.spread, b); r >= 0 {
				load[r] += c.Share / float64(c.spread)
			}
		}
	}
	homeOf := make([]int, len(est))
	for i, e := range est {
		homeOf[i] = -1
		if hot[e.ID] {
			continue
		}
		if r := home(e.ID, 1, 0); r >= 0 {
			homeOf[i] = r
			load[r] += e.Share
		}
	}
	// The keys hot by their share, largest first, each over its spread
	// or twice it, whichever lands better (buckets fall unevenly, and a
	// key over every replica loses nothing in more of them); a key keeps
	// the one it had if it is either, so that its conversations stay.
	order := make([]int, 0, len(cand))
	for i, c := range cand {
		if c.spread > MaxCrowdSpread {
			order = append(order, i)
		} else {
			spreadOver(c)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(cand[b].Share, cand[a].Share), compareID(cand[a].ID, cand[b].ID))
	})
	for _, i := range order {
		c := &cand[i]
		options := []int{c.spread}
		if c.spread*2 <= spreadLimit(healthy) {
			options = append(options, c.spread*2)
		}
		if p, ok := prev[c.ID]; ok && slices.Contains(options, p.Spread) {
			c.spread = p.Spread
		} else {
			c.spread = bestSpread(c.Estimate, load, home, options)
		}
		spreadOver(*c)
	}
	limit := Crowd / float64(healthy)
	full := map[int]bool{} // replicas with nothing left to spread
	for maxKeys <= 0 || len(cand) < maxKeys {
		// The busiest replica over the limit, lowest index on ties.
		busiest, most := -1, 0.0
		for r, l := range load {
			if l > limit && !full[r] && (l > most || l == most && r < busiest) {
				busiest, most = r, l
			}
		}
		if busiest < 0 {
			return cand
		}
		pick := -1
		for i, e := range est {
			if homeOf[i] == busiest && !hot[e.ID] && e.Share >= enter*MinCrowd && (pick < 0 || e.Share > est[pick].Share) {
				pick = i
			}
		}
		if pick < 0 {
			full[busiest] = true
			continue
		}
		load[busiest] -= est[pick].Share
		c := choice{est[pick], bestSpread(est[pick], load, home, crowdSpreads)}
		hot[c.ID] = true
		cand = append(cand, c)
		spreadOver(c)
	}
	return cand
}

// crowdSpreads are the spreads of a key spread for its replica's sake.
var crowdSpreads = []int{CrowdSpread, 2 * CrowdSpread, MaxCrowdSpread}

// bestSpread is the spread among options (ascending) that leaves the
// busiest replica the key's buckets land on least loaded, given the load
// without the key; the smallest on ties (within 0.1% of the requests):
// fewer buckets are fewer copies of its prefix.
func bestSpread(e Estimate, load map[int]float64, home Home, options []int) int {
	best, bestMax := 0, 0.0
	for _, n := range options {
		add := map[int]float64{}
		for b := range n {
			if r := home(e.ID, n, b); r >= 0 {
				add[r] += e.Share / float64(n)
			}
		}
		most := 0.0
		for r, a := range add {
			most = max(most, load[r]+a)
		}
		if best == 0 || most < bestMax-0.001 {
			best, bestMax = n, most
		}
	}
	return best
}

// Spread is the spread of a key with the given share of a pool with
// healthy replicas: the next power of two of SpreadPerReplica ×
// ceil(share × healthy), at least 2, at most the next power of two of
// SpreadPerReplica × healthy and at most fleet.MaxSpread.
func Spread(share float64, healthy int) int {
	n := max(int(math.Ceil(share*float64(healthy))), 1)
	return max(min(nextPow2(SpreadPerReplica*n), spreadLimit(healthy)), 2)
}

// spreadLimit is the most buckets a key of a pool with healthy replicas
// gets.
func spreadLimit(healthy int) int {
	return min(fleet.MaxSpread, nextPow2(SpreadPerReplica*max(healthy, 1)))
}

// SpreadPerReplica is how many buckets a hot key gets for each replica
// its share fills. Hashing puts buckets on replicas unevenly (balls in
// bins): on 8 replicas a key of 82% of the requests, in 16 buckets, left
// the busiest replica 2.9× the mean queue, in 64 buckets 1.4×, in 128
// 1.3× (system-prompt workload, 8 Envoys). Buckets cost nothing per
// conversation, which stays in its one bucket; more of them only warm
// the key's shared prefix on more replicas, once each.
const SpreadPerReplica = 16

func nextPow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// round keeps a share's first six digits, so that a table's document
// does not carry float noise.
func round(f float64) float64 { return math.Round(f*1e6) / 1e6 }

func compareID(a, b ID) int {
	if c := cmp.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	return cmp.Compare(a.Value, b.Value)
}
