// Package envoylb models Envoy's consistent-hashing load balancers exactly,
// as xds/ringhash does for gRPC clients, so that tests and measurements can
// say where Envoy sends each request under the resources kvxds serves it,
// and how many sessions a change of the fleet moves.
//
// It follows Envoy's source (envoyproxy/envoy):
//
//   - host weights (source/extensions/load_balancing_policies/common/
//     thread_aware_lb_impl.cc): the healthy hosts of priority 0 (all hosts
//     in panic), each weight divided by their sum, in host-set order (the
//     ClusterLoadAssignment's); per locality only with
//     locality_weighted_lb_config;
//   - health (source/common/upstream/upstream_impl.cc): HEALTHY and UNKNOWN
//     hosts are healthy; DEGRADED, UNHEALTHY and TIMEOUT are not; DRAINING
//     is excluded from the host set altogether (EDS_STATUS_DRAINING, the
//     exclude_host_in_eds_status_draining runtime guard, on by default), so
//     a drained host leaves the table exactly as a removed one does;
//   - a host's key: envoy.lb hash_key metadata (a string), else the
//     hostname with use_hostname_for_hashing, else the address;
//   - Maglev (maglev/maglev_lb.cc) and ring hash (ring_hash/ring_hash_lb.cc),
//     built by BuildMaglev and BuildRing;
//   - bounded load (hash_balance_factor, thread_aware_lb_impl.cc): Choose;
//   - the route's hash policies (source/common/http/hash_policy.cc):
//     CompileHashPolicy.
//
// NewBalancer builds a balancer from a served Cluster and its
// ClusterLoadAssignment, and NewRouter from a whole resource set.
package envoylb

import (
	"errors"
	"fmt"
	"math"
)

// Health is a host's health as Envoy's load balancers see it.
type Health int

const (
	// Healthy hosts (EDS HEALTHY or UNKNOWN) are in the table.
	Healthy Health = iota
	// Degraded hosts (EDS DEGRADED) are not in the table but count as
	// available when Envoy decides whether the host set is in panic.
	Degraded
	// Unhealthy hosts (EDS UNHEALTHY or TIMEOUT) are not in the table.
	Unhealthy
	// Excluded hosts (EDS DRAINING) are left out of the host set as if
	// removed, also when Envoy decides whether it is in panic.
	Excluded
)

// Host is one endpoint of a cluster.
type Host struct {
	// Address is the address as Envoy prints it: "10.0.0.1:8000",
	// "[::1]:8000".
	Address string
	// Hostname is the endpoint's hostname, used with
	// use_hostname_for_hashing.
	Hostname string
	// HashKey is the envoy.lb hash_key metadata, "" if none.
	HashKey string
	// Weight is the load-balancing weight; Envoy takes 0 as 1.
	Weight uint32
	Health Health
	// Locality indexes the cluster's localities (Config.LocalityWeights).
	Locality int
}

// Key is the string Envoy hashes to place h in a table.
func (h *Host) Key(useHostname bool) string {
	switch {
	case h.HashKey != "":
		return h.HashKey
	case useHostname:
		return h.Hostname
	}
	return h.Address
}

func (h *Host) weight() uint64 { return max(uint64(h.Weight), 1) }

// Algorithm is a consistent-hashing load balancer.
type Algorithm int

const (
	Maglev Algorithm = iota
	RingHash
)

func (a Algorithm) String() string {
	if a == RingHash {
		return "ring_hash"
	}
	return "maglev"
}

// Envoy's defaults.
const (
	DefaultTableSize      = 65537
	DefaultMinRingSize    = 1024
	DefaultMaxRingSize    = 8 * 1024 * 1024
	DefaultPanicThreshold = 50
)

// Config is a cluster's load-balancing configuration. Zero values take
// Envoy's defaults.
type Config struct {
	Algorithm Algorithm
	// TableSize is Maglev's table size, a prime.
	TableSize uint64
	// MinRingSize and MaxRingSize bound the ring.
	MinRingSize, MaxRingSize uint64
	// HashBalanceFactor is bounded load's factor in percent; 0 is off.
	HashBalanceFactor uint32
	UseHostname       bool
	// LocalityWeighted is locality_weighted_lb_config: each locality's
	// hosts share its weight.
	LocalityWeighted bool
	// LocalityWeights are the localities' weights, indexed by
	// Host.Locality.
	LocalityWeights []uint32
	// PanicThreshold is healthy_panic_threshold in percent: 0 takes
	// Envoy's default (50), a negative value turns panic off (Envoy's 0).
	PanicThreshold float64
}

func (c Config) withDefaults() Config {
	if c.TableSize == 0 {
		c.TableSize = DefaultTableSize
	}
	if c.MinRingSize == 0 {
		c.MinRingSize = DefaultMinRingSize
	}
	if c.MaxRingSize == 0 {
		c.MaxRingSize = DefaultMaxRingSize
	}
	if c.PanicThreshold == 0 {
		c.PanicThreshold = DefaultPanicThreshold
	}
	return c
}

// Weighted is a host of the table and its normalised weight.
type Weighted struct {
	Host   int // index into the hosts
	Weight float64
}

// Normalize returns the hosts Envoy puts in the table with their
// normalised weights, in host-set order, the least and largest weight,
// and whether the host set is in panic. In panic the table holds every
// host of the set (hosts(), draining ones included), as Envoy's does.
func Normalize(hosts []Host, c Config) (ws []Weighted, minW, maxW float64, panic bool) {
	c = c.withDefaults()
	panic = inPanic(hosts, c.PanicThreshold)
	in := func(h *Host) bool { return panic || h.Health == Healthy }
	minW, maxW = 1, 0
	add := func(idx []int, scale float64) {
		var sum uint64
		for _, i := range idx {
			sum += hosts[i].weight()
		}
		for _, i := range idx {
			w := float64(hosts[i].weight()) * scale / float64(sum)
			ws = append(ws, Weighted{i, w})
			minW, maxW = math.Min(minW, w), math.Max(maxW, w)
		}
	}
	if !c.LocalityWeighted || len(c.LocalityWeights) == 0 {
		var idx []int
		for i := range hosts {
			if in(&hosts[i]) {
				idx = append(idx, i)
			}
		}
		add(idx, 1)
		return ws, minW, maxW, panic
	}
	var sum uint64
	for _, w := range c.LocalityWeights {
		sum += uint64(w)
	}
	if sum == 0 {
		return nil, minW, maxW, panic
	}
	for l, w := range c.LocalityWeights {
		if w == 0 {
			continue
		}
		var idx []int
		for i := range hosts {
			if hosts[i].Locality == l && in(&hosts[i]) {
				idx = append(idx, i)
			}
		}
		if len(idx) > 0 {
			add(idx, float64(w)/float64(sum))
		}
	}
	return ws, minW, maxW, panic
}

// inPanic is LoadBalancerBase::isHostSetInPanic: the healthy and degraded
// hosts are fewer than the threshold's share of the hosts not excluded.
func inPanic(hosts []Host, threshold float64) bool {
	if threshold <= 0 {
		return false
	}
	var n, healthy, degraded int
	for i := range hosts {
		switch hosts[i].Health {
		case Excluded:
			continue
		case Healthy:
			healthy++
		case Degraded:
			degraded++
		}
		n++
	}
	if n == 0 {
		return true
	}
	return 100*float64(healthy)/float64(n)+100*float64(degraded)/float64(n) < math.Min(threshold, 100)
}

// Table is a built Maglev table or ring.
type Table interface {
	// Choose is the host (index into the hosts) a hash and retry attempt
	// select, or -1 for an empty table.
	Choose(hash uint64, attempt uint32) int
	// Shares is the fraction of the hash space each host owns, indexed
	// like the hosts.
	Shares() []float64
}

// Balancer is a cluster's consistent-hashing load balancer as one Envoy
// builds it (every worker shares the table).
type Balancer struct {
	Hosts   []Host
	Config  Config
	Weights []Weighted
	Panic   bool
	Table   Table
	// HashPolicy is the load balancer's own hash policy
	// (consistent_hashing_lb_config.hash_policy), which replaces the
	// route's when set.
	HashPolicy HashPolicy

	weightOf map[int]float64
}

// New builds the balancer Envoy builds for hosts under c.
func New(hosts []Host, c Config) (*Balancer, error) {
	c = c.withDefaults()
	b := &Balancer{Hosts: hosts, Config: c}
	var minW, maxW float64
	b.Weights, minW, maxW, b.Panic = Normalize(hosts, c)
	switch c.Algorithm {
	case Maglev:
		if !isPrime(c.TableSize) {
			return nil, errors.New("the table size of maglev must be prime number")
		}
		b.Table = BuildMaglev(hosts, b.Weights, maxW, c.TableSize, c.UseHostname)
	case RingHash:
		if c.MinRingSize > c.MaxRingSize {
			return nil, fmt.Errorf("ring hash: minimum_ring_size (%d) > maximum_ring_size (%d)", c.MinRingSize, c.MaxRingSize)
		}
		b.Table = BuildRing(hosts, b.Weights, minW, c.MinRingSize, c.MaxRingSize, c.UseHostname)
	default:
		return nil, fmt.Errorf("unknown algorithm %d", c.Algorithm)
	}
	b.weightOf = make(map[int]float64, len(b.Weights))
	for _, w := range b.Weights {
		b.weightOf[w.Host] = w.Weight
	}
	return b, nil
}

// Owner is the host the table gives hash h on a first attempt, or -1.
func (b *Balancer) Owner(h uint64) int { return b.Table.Choose(h, 0) }

// Load is what bounded load reads: requests in flight on each host
// (indexed like the hosts) and on the whole cluster (upstream_rq_active;
// normally their sum).
type Load struct {
	Active []uint32
	Total  uint32
}

// Choose is the host Envoy picks for hash h on a first attempt, with
// bounded load applied when the factor is set and load is not nil.
func (b *Balancer) Choose(h uint64, load *Load) int {
	host := b.Table.Choose(h, 0)
	if host < 0 || b.Config.HashBalanceFactor == 0 || load == nil {
		return host
	}
	return b.bounded(h, host, load)
}

// overload is hostOverloadFactor: the host's requests in flight over its
// slots, ceil(weight × ceil((total+1) × factor / 100)), at least 1.
func (b *Balancer) overload(host int, weight float64, load *Load) float64 {
	total := uint32((uint64(load.Total)+1)*uint64(b.Config.HashBalanceFactor)+99) / 100
	slots := max(uint32(math.Ceil(float64(total)*weight)), 1)
	var active uint32
	if host < len(load.Active) {
		active = load.Active[host]
	}
	return float64(active) / float64(slots)
}

// bounded is BoundedLoadHashingLoadBalancer::chooseHost: an overloaded
// host hands the request to the first host that is not, in a shuffle of
// the table's hosts seeded by the hash, else to the least overloaded.
func (b *Balancer) bounded(h uint64, host int, load *Load) int {
	f := b.overload(host, b.weightOf[host], load)
	if f <= 1 {
		return host
	}
	n := uint32(len(b.Weights))
	idx := make([]uint32, n)
	for i := range idx {
		idx[i] = uint32(i)
	}
	rng := newMT19937(uint32(h))
	best, bestF := host, f
	for i := range n {
		j := uniform(rng, n-i)
		idx[i], idx[i+j] = idx[i+j], idx[i]
		w := b.Weights[idx[i]]
		if w.Host == host {
			continue
		}
		f := b.overload(w.Host, w.Weight, load)
		if f <= 1 {
			return w.Host
		}
		if bestF > f {
			best, bestF = w.Host, f
		}
	}
	return best
}

// uniform is the [0, k) draw of the bounded-load shuffle.
func uniform(r *mt19937, k uint32) uint32 {
	x := k
	for x >= k {
		x = uint32(uint64(r.next()) / ((1 << 32) / uint64(k)))
	}
	return x
}

func isPrime(n uint64) bool {
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
