package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// Defaults of a pool's settings, filled in by the policy and by Normalize.
const (
	// DefaultBalancer is how a pool spreads requests unless it says
	// otherwise.
	DefaultBalancer = ConsistentHash
	// DefaultAlgorithm is a hash block's algorithm unless ring sizes
	// choose RingHash.
	DefaultAlgorithm = Maglev
	// DefaultKeyless is how a hash pool spreads requests without a key.
	DefaultKeyless = RoundRobin
)

// Limits of the data planes kvxds serves, shared by the policy (which
// reports them with source locations) and Prepare (the last check before
// anything is pushed).
const (
	// DefaultMaglevTableSize is Envoy's default Maglev table size (prime).
	DefaultMaglevTableSize = 65537
	// MaxMaglevTableSize is the largest Maglev table Envoy accepts.
	MaxMaglevTableSize = 5000011
	// DefaultMinRingSize is Envoy's and gRPC's default minimum ring size;
	// both reject a maximum below the minimum.
	DefaultMinRingSize = 1024
	// MaxRingSize caps ring sizes in Envoy's proto validation and in gRPC
	// (8M entries); it also bounds the gRPC ring cap.
	MaxRingSize = 8 << 20
	// MinGRPCRingCap is the smallest gRPC ring cap: one entry for each of
	// RingFullWeight units of weight.
	MinGRPCRingCap = RingFullWeight
	// MaxEndpointWeight bounds a replica's own weight (static or from
	// SRV records), before metric-driven multipliers: it keeps Maglev
	// tables balanced.
	MaxEndpointWeight = 128
	// DefaultGRPCRingCap is grpc-go's and grpc-js's default ring size cap
	// (GRPC_RING_HASH_CAP, grpc.lb.ring_hash.ring_size_cap). The model
	// sits above the client models, so it states the clients' number;
	// a test holds it to xds/ringhash.DefaultCap.
	DefaultGRPCRingCap = 4096
	// MinBalanceFactor is the smallest bounded-load factor, in percent of
	// the average load; zero turns bounded load off.
	MinBalanceFactor = 100
)

// What a hash pool's bound counts (Hash.BalanceOn).
const (
	BalanceOnRequests    = "requests"
	BalanceOnPromptBytes = "prompt_bytes"
)

// Hash.LoadInterval: the default, as the policy sets it for a pool bounding
// prompt bytes (each interval is at most one route update of the pool),
// and the shortest.
const (
	DefaultLoadInterval = time.Second
	MinLoadInterval     = 10 * time.Millisecond
)

// IsPrime reports whether n is prime (Envoy's Maglev table sizes must be).
func IsPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// checkClients reports what in the valid, normalised pool p some client
// would NACK: the limits Validate leaves out because they come from the
// data planes rather than from the model's own consistency.
func checkClients(p *Pool) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	// Protobuf refuses to marshal strings that are not UTF-8.
	strs := []string{p.Name, p.ListenAddress}
	if p.Mesh != nil {
		strs = append(strs, p.Mesh.ClusterName)
	}
	for _, k := range p.Hash.Keys {
		strs = append(strs, k.Header, k.Cookie, k.QueryParameter, k.JSONField)
	}
	for _, g := range p.Groups {
		strs = append(append(strs, g.Name, g.Header), g.Values...)
	}
	if h := p.Hash.Hot; h != nil {
		strs = append(strs, h.LogCluster, h.SpreadBy.JSONField)
	}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			bad("invalid UTF-8 in %q", s)
		}
	}
	if p.RouteTimeout < 0 || p.IdleTimeout < 0 {
		bad("negative timeout")
	}
	h := p.Hash
	if h.Algorithm == Maglev && !IsPrime(h.TableSize) {
		// Envoy rejects a Maglev table whose size is not prime.
		bad("maglev table size %d is not prime", h.TableSize)
	}
	// Both algorithms emit a RingHash policy (Maglev's is the fallback for
	// gRPC), so ring sizes are checked for both.
	if h.MinRingSize > MaxRingSize || h.MaxRingSize > MaxRingSize {
		bad("ring size above %d", MaxRingSize)
	}
	if minRing := cmp.Or(h.MinRingSize, DefaultMinRingSize); h.MaxRingSize != 0 && minRing > h.MaxRingSize {
		bad("max ring size %d below the effective min ring size %d (clients default it to %d)",
			h.MaxRingSize, minRing, DefaultMinRingSize)
	}

	// gRPC NACKs a ClusterLoadAssignment with two endpoints of the same
	// address, or whose weights overflow uint32. Locality weights are the
	// sum of their endpoints' weights, so the pool total must fit.
	type hostPort struct {
		host string
		port uint32
	}
	addrs := make(map[hostPort]bool, len(p.Endpoints))
	var total uint64
	for i := range p.Endpoints {
		e := &p.Endpoints[i]
		for _, s := range []string{e.Host, e.HashKey, e.Locality.Region, e.Locality.Zone, e.Locality.SubZone} {
			if !utf8.ValidString(s) {
				bad("invalid UTF-8 in %q", s)
			}
		}
		a := hostPort{e.Host, e.Port}
		if addrs[a] {
			bad("duplicate endpoint address %s", e.Address())
		}
		addrs[a] = true
		if e.Health < Healthy || e.Health > Unhealthy {
			bad("endpoint %s: unknown %v", e.Address(), e.Health)
		}
		total += uint64(e.Weight)
	}
	if total > math.MaxUint32 {
		bad("sum of endpoint weights %d exceeds %d", total, uint64(math.MaxUint32))
	}
	return errors.Join(errs...)
}
