// Package ringhash models the ring hash of proxyless gRPC clients (grpc-go
// balancer/ringhash, grpc-js load-balancer-ring-hash, both after Envoy's
// ring_hash) exactly, so that kvxds can size the rings it asks clients to
// build, and tests and reports can say which endpoint owns which key and
// how much of the hash space each one holds.
//
// A client gives endpoint i of weight w_i (normalised over the endpoints on
// the ring) scale × w_i/W entries, where scale = min(ceil(minWeight ×
// min_ring_size) / minWeight, max_ring_size) and the counts are taken
// cumulatively over the endpoints in hash-key order; entry j of an
// endpoint sits at xxhash64(hash_key + "_" + j). A request's hash is
// owned by the first entry at or after it, wrapping around.
package ringhash

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// DefaultCap is the largest ring grpc-go (GRPC_RING_HASH_CAP) and grpc-js
// (grpc.lb.ring_hash.ring_size_cap) build unless told otherwise: any ring
// size a cluster asks for is clamped to it.
const DefaultCap = 4096

// Endpoint is one member of a ring: its identity (grpc-go reads the
// envoy.lb hash_key metadata, grpc-js the address) and weight.
type Endpoint struct {
	HashKey string
	Weight  uint64
}

// Entry is one point of a ring.
type Entry struct {
	Hash uint64
	// Endpoint indexes the endpoints Build was given.
	Endpoint int
}

// Ring is a built ring, sorted by hash.
type Ring struct {
	Entries []Entry
	// Counts is the number of entries of each endpoint.
	Counts []int
}

// Build builds the ring a gRPC client builds for eps with the given
// (already clamped) ring sizes.
func Build(eps []Endpoint, minSize, maxSize uint64) *Ring {
	r := &Ring{Counts: make([]int, len(eps))}
	if len(eps) == 0 {
		return r
	}
	order := make([]int, len(eps))
	var sum uint64
	for i, e := range eps {
		order[i] = i
		sum += e.Weight
	}
	// Clients sort by hash key (grpc-go) or keep the EDS order, which
	// kvxds makes the hash-key order within a locality.
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(eps[a].HashKey, eps[b].HashKey) })
	minW := 1.0
	for _, e := range eps {
		minW = math.Min(minW, float64(e.Weight)/float64(sum))
	}
	scale := math.Min(math.Ceil(minW*float64(minSize))/minW, float64(maxSize))
	var cur, target float64
	for _, i := range order {
		target += scale * (float64(eps[i].Weight) / float64(sum))
		for j := 0; cur < target; j++ {
			r.Entries = append(r.Entries, Entry{xxhash.Sum64String(eps[i].HashKey + "_" + strconv.Itoa(j)), i})
			r.Counts[i]++
			cur++
		}
	}
	slices.SortStableFunc(r.Entries, func(a, b Entry) int { return cmp.Compare(a.Hash, b.Hash) })
	return r
}

// Owner returns the endpoint that owns hash h, or -1 on an empty ring.
func (r *Ring) Owner(h uint64) int {
	if len(r.Entries) == 0 {
		return -1
	}
	i, _ := slices.BinarySearchFunc(r.Entries, h, func(e Entry, h uint64) int { return cmp.Compare(e.Hash, h) })
	if i == len(r.Entries) {
		i = 0
	}
	return r.Entries[i].Endpoint
}

// Shares returns the fraction of the hash space each endpoint owns.
func (r *Ring) Shares() []float64 {
	out := make([]float64, len(r.Counts))
	n := len(r.Entries)
	for i, e := range r.Entries {
		prev := r.Entries[(i+n-1)%n].Hash
		// Unsigned subtraction wraps for the first entry, as the arc does.
		out[e.Endpoint] += float64(e.Hash-prev) / (1 << 64)
	}
	if n == 1 {
		out[r.Entries[0].Endpoint] = 1
	}
	return out
}

// HeaderHash is the hash gRPC clients compute for a request whose hash
// policy reads a header with this value (one value; several are joined
// with ",").
func HeaderHash(value string) uint64 {
	return xxhash.Sum64String(value)
}

// Extended returns a copy of r in which endpoint i of eps (the endpoints r
// was built from) has one more entry.
//
// Clients count entries in floating point, and the last endpoint of a ring
// in hash-key order ends exactly on the ring size: whether it gets its
// final entry depends on rounding that differs between clients (grpc-go
// normalises fixed-point weights, grpc-js divides the weights as they
// are). A ring and its extension of the last endpoint are the two rings a
// client may build.
func (r *Ring) Extended(eps []Endpoint, i int) *Ring {
	out := &Ring{Entries: slices.Clone(r.Entries), Counts: slices.Clone(r.Counts)}
	e := Entry{xxhash.Sum64String(eps[i].HashKey + "_" + strconv.Itoa(r.Counts[i])), i}
	at, _ := slices.BinarySearchFunc(out.Entries, e.Hash, func(x Entry, h uint64) int { return cmp.Compare(x.Hash, h) })
	out.Entries = slices.Insert(out.Entries, at, e)
	out.Counts[i]++
	return out
}

// Last is the index of the endpoint of eps that comes last in hash-key
// order, or -1 if there is none.
func Last(eps []Endpoint) int {
	last := -1
	for i := range eps {
		if last < 0 || eps[i].HashKey > eps[last].HashKey {
			last = i
		}
	}
	return last
}
