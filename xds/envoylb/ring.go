package envoylb

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Ring is Envoy's ring hash: entries sorted by hash, each owning the hash
// values from the previous entry (exclusive) up to its own.
type Ring struct {
	Hashes []uint64
	Hosts  []int32
	// Counts is the number of entries of each host, indexed like the
	// hosts.
	Counts []int
}

// BuildRing builds RingHashLoadBalancer::Ring with XX_HASH: scale =
// min(ceil(minW × minSize) / minW, maxSize); walking the hosts in
// host-set order (not sorted), a running target grows by scale × w and
// each host adds entries XXH64(key + "_" + i) until the running count
// reaches it.
func BuildRing(hosts []Host, ws []Weighted, minW float64, minSize, maxSize uint64, useHostname bool) *Ring {
	r := &Ring{Counts: make([]int, len(hosts))}
	if len(ws) == 0 {
		return r
	}
	scale := math.Min(math.Ceil(minW*float64(minSize))/minW, float64(maxSize))
	type entry struct {
		hash uint64
		host int32
	}
	es := make([]entry, 0, uint64(math.Ceil(scale)))
	var current, target float64
	buf := make([]byte, 0, 64)
	for _, w := range ws {
		buf = append(buf[:0], hosts[w.Host].Key(useHostname)...)
		buf = append(buf, '_')
		n := len(buf)
		target += scale * w.Weight
		for i := 0; current < target; i++ {
			buf = strconv.AppendInt(buf[:n], int64(i), 10)
			es = append(es, entry{xxhash.Sum64(buf), int32(w.Host)})
			r.Counts[w.Host]++
			current++
		}
	}
	// std::sort is not stable: equal hashes (vanishingly rare) may land in
	// either order in Envoy; here the lower host index comes first, so
	// the model is deterministic.
	slices.SortFunc(es, func(a, b entry) int { return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.host, b.host)) })
	r.Hashes = make([]uint64, len(es))
	r.Hosts = make([]int32, len(es))
	for i, e := range es {
		r.Hashes[i], r.Hosts[i] = e.hash, e.host
	}
	return r
}

// Choose is Ring::chooseHost: the first entry at or after h, wrapping
// around (ketama's search); a retry attempt steps that many entries on.
func (r *Ring) Choose(h uint64, attempt uint32) int {
	if len(r.Hashes) == 0 {
		return -1
	}
	i, _ := slices.BinarySearch(r.Hashes, h)
	if i == len(r.Hashes) {
		i = 0
	}
	if attempt > 0 {
		i = (i + int(attempt)) % len(r.Hashes)
	}
	return int(r.Hosts[i])
}

// Shares is the fraction of the hash space each host's arcs cover.
func (r *Ring) Shares() []float64 {
	out := make([]float64, len(r.Counts))
	n := len(r.Hashes)
	if n == 1 {
		out[r.Hosts[0]] = 1
		return out
	}
	for i, h := range r.Hashes {
		prev := r.Hashes[(i+n-1)%n]
		// Unsigned subtraction wraps for the first entry, as its arc does.
		out[r.Hosts[i]] += float64(h-prev) / (1 << 64)
	}
	return out
}
