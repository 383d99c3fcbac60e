package envoylb

import (
	"cmp"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// MaglevTable is Envoy's Maglev table: Slots[i] is the host (index into
// the hosts) that owns hash values ≡ i mod the table size.
type MaglevTable struct {
	Slots []int32
	// Counts is the number of slots of each host, indexed like the hosts.
	Counts []int
}

// BuildMaglev builds the table of OriginalMaglevTable (CompactMaglevTable
// fills the same one): hosts sorted by key, each with offset XXH64(key,
// seed 0) mod M and skip XXH64(key, seed 1) mod (M−1) + 1, take slots in
// rounds; in round r a host of normalised weight w takes one when r × w
// reaches its target, which then grows by the largest weight, and probes
// offset + skip × next until it finds a free slot.
func BuildMaglev(hosts []Host, ws []Weighted, maxW float64, size uint64, useHostname bool) *MaglevTable {
	t := &MaglevTable{Counts: make([]int, len(hosts))}
	if len(ws) == 0 {
		return t
	}
	type entry struct {
		key                string
		host               int
		offset, skip, next uint64
		weight, target     float64
	}
	es := make([]entry, len(ws))
	for i, w := range ws {
		key := hosts[w.Host].Key(useHostname)
		es[i] = entry{
			key: key, host: w.Host, weight: w.Weight,
			offset: xxhash.Sum64String(key) % size,
			skip:   seeded(key, 1)%(size-1) + 1,
		}
	}
	slices.SortStableFunc(es, func(a, b entry) int { return cmp.Compare(a.key, b.key) })
	t.Slots = make([]int32, size)
	for i := range t.Slots {
		t.Slots[i] = -1
	}
	var filled uint64
	for iteration := uint32(1); filled < size; iteration++ {
		for i := 0; i < len(es) && filled < size; i++ {
			e := &es[i]
			if float64(iteration)*e.weight < e.target {
				continue
			}
			e.target += maxW
			c := (e.offset + e.skip*e.next) % size
			for t.Slots[c] >= 0 {
				e.next++
				c = (e.offset + e.skip*e.next) % size
			}
			t.Slots[c] = int32(e.host)
			e.next++
			t.Counts[e.host]++
			filled++
		}
	}
	return t
}

// Choose is MaglevTable::chooseHost: a retry attempt flips the hash with
// ~0 − attempt + 1.
func (t *MaglevTable) Choose(h uint64, attempt uint32) int {
	if len(t.Slots) == 0 {
		return -1
	}
	if attempt > 0 {
		h ^= ^uint64(0) - uint64(attempt) + 1
	}
	return int(t.Slots[h%uint64(len(t.Slots))])
}

// Shares is each host's share of the slots.
func (t *MaglevTable) Shares() []float64 {
	out := make([]float64, len(t.Counts))
	for i, c := range t.Counts {
		if len(t.Slots) > 0 {
			out[i] = float64(c) / float64(len(t.Slots))
		}
	}
	return out
}

// seeded is XXH64 of s with a seed (Envoy's HashUtil::xxHash64(s, seed)).
func seeded(s string, seed uint64) uint64 {
	d := xxhash.NewWithSeed(seed)
	d.WriteString(s)
	return d.Sum64()
}
