package fleet

import (
	"cmp"
	"slices"
)

// Placing idle slots by load. A prefill table's slots hold conversations
// (or prompt prefixes) in progress, whose prefix is cached on their
// replica, and idle slots, where no logged request went for IdleAfter.
// A new conversation's key falls on a slot at random, so the replicas
// that hold the most idle slots get the most new conversations. Moving
// an idle slot loses no cached prefix; moving a busy one would. So busy
// slots stay where they are, and idle slots go to the replicas with the
// least load, as an index router sends a conversation it has not seen
// to the replica with the least work: the load the busy slots carry is
// what each replica has to do, and the idle slots are what it will be
// given.

// SlotLoad is what the logs say of each slot of a prefill table: whether
// it is idle, and the rate of requests it carries (any unit: only the
// ratios count), decayed as the caller likes.
type SlotLoad struct {
	Idle []bool
	Rate []float64
}

// PlaceIdleSlots decides the moves of a prefill table t (as served, its
// moves applied) for the load l: each replica's load is the rate of its
// busy slots over its share of the table by rendezvous hashing (its
// weight); the idle slots are filled like water into the least loaded
// replicas, each idle slot counting as a busy slot's mean rate, and
// handed from the replicas that hold more than that (by more than a
// dead band, so that noise moves nothing) to those that hold fewer, an
// idle slot going back to its rendezvous replica where that one takes
// slots. At most maxMoves slots move. The moves are all slots whose
// replica differs from rendezvous hashing's, sorted by slot: a pure
// function of t and l, so every kvxds instance given the same logs
// decides alike. Without busy slots, or with fewer than two replicas,
// the table's moves stay as they are.
func PlaceIdleSlots(t *PrefillTable, l SlotLoad, maxMoves int) []PrefillMove {
	if t == nil || len(t.base) != len(t.Slots) || len(l.Idle) != len(t.Slots) || len(l.Rate) != len(t.Slots) {
		return nil
	}
	n := len(t.Hosts)
	if n < 2 {
		return t.moves(t.Slots)
	}
	share := make([]float64, n) // rendezvous slots, as a weight
	load := make([]float64, n)
	held := make([]int, n) // idle slots held
	busy, total := 0, 0.0
	for s, h := range t.Slots {
		share[t.base[s]]++
		if l.Idle[s] {
			held[h]++
			continue
		}
		busy++
		load[h] += l.Rate[s]
		total += l.Rate[s]
	}
	idle := len(t.Slots) - busy
	if busy == 0 || !(total > 0) || idle == 0 {
		return t.moves(t.Slots)
	}
	for h := range share {
		share[h] = max(share[h], 1) / float64(len(t.Slots)) * float64(n)
	}
	// Water filling: each idle slot to the replica whose load, with the
	// idle slots it has been given, is least for its weight.
	per := total / float64(busy)
	want := make([]int, n)
	for range idle {
		best := 0
		for h := 1; h < n; h++ {
			a := (load[h] + per*float64(want[h])) / share[h]
			b := (load[best] + per*float64(want[best])) / share[best]
			if a < b {
				best = h
			}
		}
		want[best]++
	}
	// A replica gives what it holds beyond its due and the dead band;
	// one takes what it lacks.
	band := max(1, idle/(8*n))
	give := make([]int, n)
	take := make([]int, n)
	for h := range n {
		if d := held[h] - want[h]; d > band {
			give[h] = d - band
		} else if d < 0 {
			take[h] = -d
		}
	}
	slots := slices.Clone(t.Slots)
	moved := 0
	// Givers by most to give, then by index; their idle slots away from
	// their rendezvous replica first (back home), then by slot.
	givers := make([]int, 0, n)
	for h := range n {
		if give[h] > 0 {
			givers = append(givers, h)
		}
	}
	slices.SortStableFunc(givers, func(a, b int) int { return cmp.Compare(give[b], give[a]) })
	for _, h := range givers {
		var cand []int
		for s, o := range slots {
			if int(o) == h && l.Idle[s] {
				cand = append(cand, s)
			}
		}
		slices.SortStableFunc(cand, func(a, b int) int {
			return cmp.Compare(boolInt(int(t.base[a]) == h), boolInt(int(t.base[b]) == h))
		})
		for _, s := range cand {
			if give[h] == 0 || moved == maxMoves {
				break
			}
			to := -1
			if home := int(t.base[s]); take[home] > 0 {
				to = home
			} else {
				for r := range n {
					if take[r] > 0 && (to < 0 || take[r] > take[to]) {
						to = r
					}
				}
			}
			if to < 0 {
				break
			}
			slots[s] = uint16(to)
			give[h]--
			take[to]--
			moved++
		}
	}
	return t.moves(slots)
}

// moves are the slots of slots that differ from t's rendezvous base, as
// moves sorted by slot.
func (t *PrefillTable) moves(slots []uint16) []PrefillMove {
	var out []PrefillMove
	for s, h := range slots {
		if h != t.base[s] {
			out = append(out, PrefillMove{Slot: s, Host: t.Hosts[h]})
		}
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
