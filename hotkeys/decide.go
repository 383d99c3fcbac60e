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
//   - its spread is the next power of two of at least twice the
//     replicas its share fills, ceil(share × healthy), at least 2 and at
//     most the next power of two of 4 × healthy (and fleet.MaxSpread);
//     an entry whose spread level did not change is kept as it was, so
//     the table changes only when a key enters, leaves or changes level;
//   - at most settings.Max keys, the highest shares first, ties by key
//     and value.
//
// Without traffic since the last decision, or with less than MinRequests
// observed, the previous table stays: a table decays out only through
// traffic observed, never because logs stopped (fail static).
func (s *Sketch) Decide(now time.Time, healthy int, settings *fleet.HotKeys, previous []fleet.HotKey) []fleet.HotKey {
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
	est := s.sharesLocked(enter / 2)
	s.mu.Unlock()

	prev := make(map[ID]fleet.HotKey, len(previous))
	for _, hk := range previous {
		prev[ID{hk.Key, hk.Value}] = hk
	}
	var cand []Estimate
	for _, e := range est {
		if _, was := prev[e.ID]; e.Share >= enter || was {
			cand = append(cand, e)
		}
	}
	slices.SortFunc(cand, func(a, b Estimate) int {
		if c := cmp.Compare(b.Share, a.Share); c != 0 {
			return c
		}
		return compareID(a.ID, b.ID)
	})
	if settings.Max > 0 && len(cand) > settings.Max {
		cand = cand[:settings.Max]
	}
	out := make([]fleet.HotKey, 0, len(cand))
	for _, e := range cand {
		spread := Spread(e.Share, healthy)
		if p, ok := prev[e.ID]; ok && p.Spread == spread {
			out = append(out, p)
			continue
		}
		out = append(out, fleet.HotKey{Key: e.Key, Value: e.Value, Share: round(e.Share), Spread: spread})
	}
	slices.SortFunc(out, func(a, b fleet.HotKey) int {
		return compareID(ID{a.Key, a.Value}, ID{b.Key, b.Value})
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// Spread is the spread of a key with the given share of a pool with
// healthy replicas: the next power of two of SpreadPerReplica ×
// ceil(share × healthy), at least 2, at most the next power of two of
// SpreadPerReplica × healthy and at most fleet.MaxSpread.
func Spread(share float64, healthy int) int {
	n := max(int(math.Ceil(share*float64(healthy))), 1)
	limit := min(fleet.MaxSpread, nextPow2(SpreadPerReplica*max(healthy, 1)))
	return max(min(nextPow2(SpreadPerReplica*n), limit), 2)
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
