package fleet

import (
	"cmp"
)

// Sizing of proxyless gRPC clients' ring hash: part of the model, since
// the status and the scraper reason about the same rings the translator
// asks clients to build.

// RingFullWeight is the weight on a pool's ring, in units of endpoint
// weight, at which kvxds's sizing fills proxyless gRPC clients' ring cap:
// each unit of weight gets cap/RingFullWeight ring entries (64 with the
// clients' default cap of 4,096).
//
// gRPC clients derive every endpoint's entry count from the ring size the
// cluster asks for and the endpoint's share of the total weight. With a
// fixed ring size, a replica leaving gives its entries to everyone else,
// and each new entry takes an arc, and its keys, from a replica that
// stayed. kvxds instead sizes each pool's ring to a fixed number of
// entries per unit of the weight on the ring, so an endpoint whose weight
// is unchanged keeps exactly the same entries whatever the membership:
// only the keys of a replica that leaves move, and a replica that joins
// takes keys only for itself.
//
// The trade-off is balance: the largest share falls roughly as 1 +
// 2.5/sqrt(entries per endpoint), and the cap bounds the entries. 64
// keeps the guarantee up to 64 replicas of weight 1 (or 16 of weight 4);
// beyond that entries per unit shrink with the weight and membership
// changes move other keys again, a little.
const RingFullWeight = 64

// EntriesPerWeight is how many ring entries each unit of weight gets
// under a client ring cap (0: the clients' default).
func EntriesPerWeight(ringCap uint64) uint64 {
	return max(1, cmp.Or(ringCap, DefaultGRPCRingCap)/RingFullWeight)
}

// GRPCRingSize is the ring size (minimum and maximum alike) that gives
// every unit of weight EntriesPerWeight(ringCap) entries when the
// endpoints on the ring weigh weight in all, within the clients' cap
// (0: their default). It returns 0 for an empty ring (nothing to size).
//
// The size is one less than entries × weight on purpose: clients count
// entries cumulatively in floating point, and a target a fraction below
// each whole count (rather than exactly on it) makes every endpoint's
// count immune to rounding; only the last endpoint of the ring gets one
// entry less. When even one entry per unit of weight exceeds the cap, the
// ring is the cap, shared in proportion to weight, and membership changes
// move other keys again.
func GRPCRingSize(weight, ringCap uint64) uint64 {
	return RingSize(weight, EntriesPerWeight(ringCap), ringCap)
}

// RingSize is GRPCRingSize with perWeight entries per unit of weight
// instead of EntriesPerWeight(ringCap).
func RingSize(weight, perWeight, ringCap uint64) uint64 {
	if weight == 0 {
		return 0
	}
	ringCap = cmp.Or(ringCap, DefaultGRPCRingCap)
	k := min(max(perWeight, 1), (ringCap+1)/weight)
	if k == 0 {
		return ringCap
	}
	return max(1, k*weight-1) // a ring of one entry still needs it
}

// GroupEntriesPerWeight is how many ring entries each unit of weight
// gets on the gRPC ring of a tenant group of replicas members, each
// weighing at most memberWeight (0: 1), under a client ring cap (0:
// their default): the cap shared among the group at full weight, and
// never fewer than the pool's EntriesPerWeight.
//
// A pool's ring cannot be sized for its membership, which discovery
// changes; a group's size is fixed by its policy, so its ring can, and
// the entries per unit still never change as members come and go or
// weights move. A group is small by design, and with the pool's 64 a
// small ring splits it unevenly: two members of equal weight 3 own
// 48% and 52% of a 383-entry ring (0.5 ± 0.021 on average over random
// identities, up to 0.076 off), which for a tenant with no key inside its
// group is a 4% lighter and a 4% heavier replica. At 512 entries per unit
// (two members of weight up to 4) the average is 0.5 ± 0.007.
func GroupEntriesPerWeight(replicas int, memberWeight uint32, ringCap uint64) uint64 {
	ringCap = cmp.Or(ringCap, DefaultGRPCRingCap)
	full := uint64(max(replicas, 1)) * uint64(max(memberWeight, 1))
	return max(EntriesPerWeight(ringCap), (ringCap+1)/full)
}

// RingWeight is the weight gRPC clients put on a ring of eps: they use
// only HEALTHY (and UNKNOWN) endpoints.
func RingWeight(eps []Endpoint) uint64 {
	var w uint64
	for i := range eps {
		if eps[i].Health == Healthy {
			w += uint64(eps[i].Weight)
		}
	}
	return w
}

// EnvoyRingSize is the ring size (minimum and maximum alike) kvxds asks
// Envoy for when a pool sets entriesPerWeight: that many entries per unit
// of the healthy weight of eps, within Envoy's 8M limit (beyond it the
// ring is the limit, shared in proportion to weight). Zero for no
// healthy weight. The plan holds it for each table (Plan.EnvoyRingSize,
// GroupPlan.EnvoyRingSize), computed once per push.
//
// Envoy scales its ring by min(ceil(min_w × min) / min_w, max) over
// normalised weights and counts entries by a running sum: with min = max
// = entries × weight − 1 the scale is the maximum, every running target
// falls a fraction short of a whole count, and each host gets exactly
// entries × its weight, the last one possibly one less, whatever the
// others are (as GRPCRingSize; xds/envoylb checks it). Envoy has no
// 4,096 cap, so entries per unit are not shared out. (In panic, Envoy
// puts every host on the ring, which then shares these entries.)
//
// Exactly entries × weight would also give every host its count in
// practice, but a running target landing exactly on a whole count can
// round either way; one less keeps every target a fraction short.
func EnvoyRingSize(eps []Endpoint, entriesPerWeight uint64) uint64 {
	return RingSize(RingWeight(eps), entriesPerWeight, MaxRingSize)
}
