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
//
// Clients compute the cumulative targets in floating point, each its own
// way: grpc-js divides the weights as they are (as Build does), grpc-go
// first normalises them to 31-bit fixed point (gRFC A113), rounding each
// down. Where a target is a whole number in exact arithmetic, a client may
// land a hair above it and give that endpoint one more entry, and which
// clients do depends on the weights and their order. Under kvxds's sizing
// only the last endpoint's target, the ring size, is whole: BuildExact and
// its Extended for the last endpoint are then the two rings any client
// may build.
//
// The weights a client divides are not always the endpoints' own: each
// implementation combines them with their localities' weights its own way
// (Weigh, Arithmetic, Clients).
package ringhash

import (
	"cmp"
	"math"
	"math/bits"
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
// (already clamped) ring sizes, in grpc-js's floating-point arithmetic: a
// whole target may come out a hair above its exact value and give its
// endpoint one more entry than BuildExact does (see the package comment).
func Build(eps []Endpoint, minSize, maxSize uint64) *Ring {
	order, cum := floatTargets(eps, minSize, maxSize)
	return place(eps, order, cum)
}

// BuildOrdered is Build over the endpoints in the order given rather than
// in hash-key order: grpc-js counts entries over the assignment's
// endpoints as listed, and places each by its address, not its hash_key,
// so the order of its keys is not the order of its counts.
func BuildOrdered(eps []Endpoint, minSize, maxSize uint64) *Ring {
	order := make([]int, len(eps))
	var sum uint64
	for i, e := range eps {
		order[i], sum = i, sum+e.Weight
	}
	return place(eps, order, countTargets(eps, order, sum, minSize, maxSize))
}

// floatTargets returns the endpoints in hash-key order and how many
// entries those up to each hold together, in grpc-js's arithmetic.
func floatTargets(eps []Endpoint, minSize, maxSize uint64) (order []int, cum []uint64) {
	order, sum, _ := sorted(eps)
	return order, countTargets(eps, order, sum, minSize, maxSize)
}

// countTargets is how many entries the endpoints up to each of order hold
// together, in grpc-js's arithmetic, for endpoints of total weight sum.
func countTargets(eps []Endpoint, order []int, sum, minSize, maxSize uint64) (cum []uint64) {
	cum = make([]uint64, len(order))
	if sum == 0 {
		return cum
	}
	minW := 1.0
	for _, e := range eps {
		minW = math.Min(minW, float64(e.Weight)/float64(sum))
	}
	scale := math.Min(math.Ceil(minW*float64(minSize))/minW, float64(maxSize))
	var cur, target float64
	for k, i := range order {
		target += scale * (float64(eps[i].Weight) / float64(sum))
		for cur < target {
			cur++
		}
		cum[k] = uint64(cur)
	}
	return cum
}

// BuildExact builds the ring of Build in exact arithmetic: the endpoints
// up to and including the k-th in hash-key order, of weight C_k in all,
// hold ceil(scale × C_k / W) entries together. It is the ring every client
// builds, except that a client may give the endpoint of a whole target
// (under kvxds's sizing, only the last one) one more entry: see Extended.
func BuildExact(eps []Endpoint, minSize, maxSize uint64) *Ring {
	order, cum := exactTargets(eps, minSize, maxSize)
	return place(eps, order, cum)
}

// exactTargets is floatTargets in exact arithmetic.
func exactTargets(eps []Endpoint, minSize, maxSize uint64) (order []int, cum []uint64) {
	order, sum, minW := sorted(eps)
	cum = make([]uint64, len(order))
	if sum == 0 || minW == 0 {
		return order, cum // clients reject zero weights
	}
	// With minWeight = minW/W, scale = min(n × W/minW, maxSize) where
	// n = ceil(minW × minSize / W), and the target of weight C is
	// scale × C/W: maxSize × C/W when capped, n × C/minW otherwise. The
	// products take 128 bits; every quotient fits in 64 (n is at most
	// minSize, a target at most maxSize).
	n := mulDivCeil(minW, minSize, sum)
	hi1, lo1 := bits.Mul64(n, sum)
	hi2, lo2 := bits.Mul64(maxSize, minW)
	capped := hi1 > hi2 || hi1 == hi2 && lo1 >= lo2
	var c uint64
	for k, i := range order {
		c += eps[i].Weight
		if capped {
			cum[k] = mulDivCeil(maxSize, c, sum)
		} else {
			cum[k] = mulDivCeil(n, c, minW)
		}
	}
	return order, cum
}

// sorted returns the indices of eps in hash-key order, their total weight
// and the least weight. Clients sort by hash key (grpc-go) or keep the EDS
// order, which kvxds makes the hash-key order within a locality.
func sorted(eps []Endpoint) (order []int, sum, minW uint64) {
	order = make([]int, len(eps))
	for i, e := range eps {
		order[i] = i
		sum += e.Weight
		if i == 0 || e.Weight < minW {
			minW = e.Weight
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(eps[a].HashKey, eps[b].HashKey) })
	return order, sum, minW
}

// place builds the ring in which the endpoints up to the k-th of order
// hold cum[k] entries together.
func place(eps []Endpoint, order []int, cum []uint64) *Ring {
	r := &Ring{Counts: make([]int, len(eps))}
	if len(cum) > 0 {
		r.Entries = make([]Entry, 0, cum[len(cum)-1])
	}
	rank := make([]int, len(eps)) // an endpoint's place in order
	var cur uint64
	var key []byte
	for k, i := range order {
		rank[i] = k
		key = append(append(key[:0], eps[i].HashKey...), '_')
		n := len(key)
		for j := 0; cur < cum[k]; j++ {
			key = strconv.AppendInt(key[:n], int64(j), 10)
			r.Entries = append(r.Entries, Entry{xxhash.Sum64(key), i})
			r.Counts[i]++
			cur++
		}
	}
	// By hash, equal hashes in the order placed (clients sort stably):
	// two entries of one endpoint on one hash are alike.
	slices.SortFunc(r.Entries, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Hash, b.Hash), cmp.Compare(rank[a.Endpoint], rank[b.Endpoint]))
	})
	return r
}

// mulDivCeil is ceil(a × b / d), for a quotient that fits in 64 bits.
func mulDivCeil(a, b, d uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, rem := bits.Div64(hi, lo, d)
	if rem != 0 {
		q++
	}
	return q
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
// in hash-key order ends exactly on the ring size: whether it gets one
// entry more than in exact arithmetic depends on rounding that differs
// between clients (grpc-go normalises fixed-point weights, grpc-js divides
// the weights as they are), and on the weights' order. The ring of
// BuildExact and its extension of the last endpoint are the two rings a
// client may build; Build's ring is one of them, not necessarily the one a
// given client builds.
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
