package fleet

import (
	"cmp"
	"slices"
)

// assignSlots gives each of n slots a host. Host i competes with the
// virtual identities seeds[i]: a slot ranks the hosts by their best
// identity's rendezvous score for it. Each host takes at most its quota,
// its share of the slots by identities (rounded by the largest
// remainder), so shares are exact: plain rendezvous leaves equal replicas
// ±1/√(slots per replica) apart (115–141 of 1,024 slots over 8 replicas,
// the busiest a tenth over the mean for as long as the membership holds).
// A slot goes to the first host in its ranking with room; a full host
// keeps the slots that rank it highest and passes the others on (deferred
// acceptance, slots proposing), so a join or a leave moves the slots the
// replica wins or held and the few a full host passes on. Integer
// arithmetic only: every kvxds instance builds the same table.
func assignSlots(n int, seeds [][]uint64) []uint16 {
	quota := slotQuotas(n, seeds)
	score := func(s, h int) uint64 { return slotScore(seeds[h], s) }
	slots := make([]uint16, n)
	// A slot's first proposal scans the hosts for its best; one passed on
	// scans for its next slotCandidates at once, so a long chain costs few
	// scans.
	next := make([][]rank, n)
	last := make([]rank, n) // the host a slot last proposed to, host -1 for none
	for s := range last {
		last[s].host = -1
	}
	held := make([]slotHeap, len(seeds))
	for h, q := range quota {
		held[h] = make(slotHeap, 0, q)
	}
	for s := range n {
		for cur := s; ; {
			best := rank{host: -1}
			switch {
			case len(next[cur]) > 0:
				best = next[cur][len(next[cur])-1]
				next[cur] = next[cur][:len(next[cur])-1]
			case last[cur].host < 0:
				for h := range seeds {
					if quota[h] == 0 {
						continue
					}
					if r := (rank{score(cur, h), h}); best.host < 0 || r.above(best) {
						best = r
					}
				}
			default:
				buf := make([]rank, 0, slotCandidates)
				for h := range seeds {
					if quota[h] == 0 {
						continue
					}
					if r := (rank{score(cur, h), h}); last[cur].above(r) {
						buf = r.insertInto(buf)
					}
				}
				// Quotas sum to n, and a host that passed a slot on is
				// full for good: some host below always has room.
				best, next[cur] = buf[len(buf)-1], buf[:len(buf)-1]
			}
			last[cur] = best
			hp := &held[best.host]
			in := heldSlot{best.score, cur}
			if len(*hp) < quota[best.host] {
				hp.push(in)
				slots[cur] = uint16(best.host)
				break
			}
			if worst := (*hp)[0]; in.above(worst) {
				(*hp)[0] = in
				hp.down(0)
				slots[cur] = uint16(best.host)
				cur = worst.slot // passed on: it proposes further down
			}
		}
	}
	return slots
}

// slotScore is a host's rendezvous score for slot s: the best of its
// virtual identities' hashes, each mixed with the slot's.
func slotScore(ids []uint64, s int) uint64 {
	x := (uint64(s) + 1) * 0x9e3779b97f4a7c15
	var best uint64
	for k, id := range ids {
		if v := mix64(id ^ x); k == 0 || v > best {
			best = v
		}
	}
	return best
}

// rank is a host's place in a slot's ranking.
type rank struct {
	score uint64
	host  int
}

// above: r ranks before t (the higher score, then the lower host index).
func (r rank) above(t rank) bool { return r.score > t.score || r.score == t.score && r.host < t.host }

// insertInto adds r to buf, ascending, keeping the slotCandidates best.
func (r rank) insertInto(buf []rank) []rank {
	if len(buf) == slotCandidates {
		if !r.above(buf[0]) {
			return buf
		}
		i := 0
		for ; i+1 < len(buf) && r.above(buf[i+1]); i++ {
			buf[i] = buf[i+1]
		}
		buf[i] = r
		return buf
	}
	buf = append(buf, r)
	i := len(buf) - 1
	for ; i > 0 && buf[i-1].above(r); i-- {
		buf[i] = buf[i-1]
	}
	buf[i] = r
	return buf
}

// slotCandidates is how many of a slot's hosts one scan finds.
const slotCandidates = 8

// slotQuotas splits n slots between hosts by their identities, the
// remainder to the largest fractions (ties to the higher first identity's
// hash, not to an address's place in the order).
func slotQuotas(n int, seeds [][]uint64) []int {
	total := 0
	for _, s := range seeds {
		total += len(s)
	}
	quota := make([]int, len(seeds))
	if total == 0 {
		return quota
	}
	rem := make([]int, len(seeds))
	left := n
	for i, s := range seeds {
		quota[i] = n * len(s) / total
		rem[i] = n * len(s) % total
		left -= quota[i]
	}
	order := make([]int, len(seeds))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(rem[b], rem[a]); c != 0 {
			return c
		}
		return cmp.Compare(firstSeed(seeds[b]), firstSeed(seeds[a]))
	})
	for _, i := range order[:left] {
		quota[i]++
	}
	return quota
}

// firstSeed is the hash of a host's first identity (0 for a host with
// none, whose quota is 0 anyway).
func firstSeed(ids []uint64) uint64 {
	if len(ids) == 0 {
		return 0
	}
	return mix64(ids[0])
}

// heldSlot is a slot a host holds, by the host's score for it.
type heldSlot struct {
	score uint64
	slot  int
}

// above: s ranks the host higher than t (the higher score, then the lower
// slot).
func (s heldSlot) above(t heldSlot) bool {
	return s.score > t.score || s.score == t.score && s.slot < t.slot
}

// slotHeap is a host's slots, a binary heap with the one it ranks lowest
// on top.
type slotHeap []heldSlot

func (h *slotHeap) push(x heldSlot) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a[p].above(a[i]) {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

// down restores the heap below i after a[i] rose in rank.
func (h slotHeap) down(i int) {
	for {
		l, low := 2*i+1, i
		if l < len(h) && h[low].above(h[l]) {
			low = l
		}
		if r := l + 1; r < len(h) && h[low].above(h[r]) {
			low = r
		}
		if low == i {
			return
		}
		h[i], h[low] = h[low], h[i]
		i = low
	}
}
