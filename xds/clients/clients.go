// Package clients builds the hash table each kind of xDS client builds
// from the resources it is served: Envoy's Maglev table or ring from a
// Cluster and its ClusterLoadAssignment (xds/envoylb), and the rings of
// proxyless gRPC clients from theirs (xds/ringhash). It is the one model
// of those tables: what a push moved, and each replica's share of a
// table, are read from it, so they follow the resources as served, not a
// restatement of how they are made.
//
// Each client reads the resources its own way:
//
//   - Envoy takes the first policy of load_balancing_policy it knows (or
//     the legacy lb_policy), its hosts in the assignment's order, and
//     places them by envoy.lb hash_key (xds/envoylb);
//   - grpc-go, grpc-java and C-core (GRPC) take a ring hash, put the
//     HEALTHY and UNKNOWN endpoints of priority 0 on it weighing locality
//     weight × endpoint weight (ringhash.Product; with one locality, as
//     kvxds serves them, every arithmetic gives each endpoint
//     weight/total), count entries in hash-key order and place them by
//     hash_key (gRFC A76);
//   - grpc-js (GRPCJS) does the same but places endpoints by address,
//     whatever their hash_key (it does not implement gRFC A76), and counts
//     entries in the assignment's order (load-balancer-ring-hash.js
//     constructRing, @grpc/grpc-js-xds 1.14).
//
// gRPC clients clamp the ring sizes a cluster asks for to their ring cap,
// which is the client's setting, not the cluster's: callers pass it.
package clients

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"

	"github.com/kvxds/kvxds/xds/envoylb"
	"github.com/kvxds/kvxds/xds/ringhash"
)

// Client is an implementation whose tables are modelled.
type Client int

const (
	// Envoy builds Maglev or ring hash (xds/envoylb).
	Envoy Client = iota
	// GRPC is grpc-go, grpc-java and C-core: a ring on hash_key.
	GRPC
	// GRPCJS is grpc-js: a ring on addresses.
	GRPCJS
)

func (c Client) String() string {
	switch c {
	case Envoy:
		return "envoy"
	case GRPC:
		return "grpc"
	case GRPCJS:
		return "grpc-js"
	}
	return fmt.Sprintf("client(%d)", int(c))
}

// ErrNotHashing is returned for a cluster whose load balancer, as the
// client reads it, does not hash: it has no table.
var ErrNotHashing = envoylb.ErrNotHashing

// gRPC's ring sizes when a cluster sets none (gRFC A42).
const (
	defaultMinRingSize = 1024
	defaultMaxRingSize = 8 * 1024 * 1024
)

// Table is one cluster's hash table as a client builds it: a Maglev table
// or a ring, whose owners index Hosts.
type Table struct {
	// Cluster names the cluster.
	Cluster string
	// Hosts are the identities of the assignment's endpoints, in its
	// order, in the table or not: each one's envoy.lb hash_key, else its
	// address (whatever the client places it by).
	Hosts []string
	// Maglev says the table is Envoy's Maglev: Slots, each a host or -1.
	// Otherwise it is a ring: Hashes sorted, Owners the host of each.
	Maglev bool
	Slots  []int32
	Hashes []uint64
	Owners []int32
}

// Empty reports whether the table routes nothing.
func (t *Table) Empty() bool { return len(t.Slots) == 0 && len(t.Hashes) == 0 }

// Shares returns the fraction of the hash space each host owns.
func (t *Table) Shares() []float64 {
	out := make([]float64, len(t.Hosts))
	if t.Maglev {
		for _, h := range t.Slots {
			if h >= 0 {
				out[h]++
			}
		}
		for i := range out {
			out[i] /= float64(len(t.Slots))
		}
		return out
	}
	n := len(t.Hashes)
	if n == 1 {
		out[t.Owners[0]] = 1
		return out
	}
	for i, h := range t.Hashes {
		// Unsigned subtraction wraps for the first entry, as the arc does.
		out[t.Owners[i]] += float64(h-t.Hashes[(i+n-1)%n]) / (1 << 64)
	}
	return out
}

// Served is the clusters and assignments one kind of client is served,
// by name.
type Served struct {
	clusters map[string]*clusterv3.Cluster
	clas     map[string]*endpointv3.ClusterLoadAssignment
}

// NewServed indexes the resources of one kind of client.
func NewServed(clusters []*clusterv3.Cluster, clas []*endpointv3.ClusterLoadAssignment) *Served {
	s := &Served{
		clusters: make(map[string]*clusterv3.Cluster, len(clusters)),
		clas:     make(map[string]*endpointv3.ClusterLoadAssignment, len(clas)),
	}
	for _, c := range clusters {
		s.clusters[c.GetName()] = c
	}
	for _, cla := range clas {
		s.clas[cla.GetClusterName()] = cla
	}
	return s
}

// Table builds the table client builds for the served cluster named
// cluster over its assignment; ringCap is a gRPC client's ring cap (0:
// ringhash.DefaultCap). It returns ErrNotHashing for a cluster that does
// not hash, and an error for one that is not served.
func (s *Served) Table(client Client, cluster string, ringCap uint64) (*Table, error) {
	c, ok := s.clusters[cluster]
	if !ok {
		return nil, fmt.Errorf("no cluster %s", cluster)
	}
	name := c.GetEdsClusterConfig().GetServiceName()
	if name == "" {
		name = c.GetName()
	}
	cla, ok := s.clas[name]
	if !ok {
		return nil, fmt.Errorf("cluster %s: no assignment %s", cluster, name)
	}
	return Build(client, c, cla, ringCap)
}

// Build builds the table client builds for cluster c over its assignment
// cla; ringCap is a gRPC client's ring cap (0: ringhash.DefaultCap).
func Build(client Client, c *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, ringCap uint64) (*Table, error) {
	if client == Envoy {
		return envoyTable(c, cla)
	}
	if client != GRPC && client != GRPCJS {
		return nil, fmt.Errorf("unknown client %v", client)
	}
	minSize, maxSize, err := grpcRingSizes(c)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.GetName(), err)
	}
	if ringCap == 0 {
		ringCap = ringhash.DefaultCap
	}
	return grpcTable(client, c.GetName(), cla, min(minSize, ringCap), min(maxSize, ringCap))
}

// envoyTable is the table of Envoy's balancer for c and cla.
func envoyTable(c *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) (*Table, error) {
	b, err := envoylb.NewBalancer(c, cla)
	if err != nil {
		return nil, err
	}
	t := &Table{Cluster: c.GetName(), Hosts: make([]string, len(b.Hosts))}
	for i := range b.Hosts {
		t.Hosts[i] = b.Hosts[i].Key(false)
	}
	switch tb := b.Table.(type) {
	case *envoylb.MaglevTable:
		t.Maglev, t.Slots = true, tb.Slots
	case *envoylb.Ring:
		t.Hashes, t.Owners = tb.Hashes, tb.Hosts
	default:
		return nil, fmt.Errorf("cluster %s: table %T is not modelled", c.GetName(), tb)
	}
	return t, nil
}

// grpcRingSizes reads the ring sizes a gRPC client takes from c: the
// first policy of load_balancing_policy it knows, or the legacy
// lb_policy RING_HASH. ErrNotHashing if that policy does not hash.
func grpcRingSizes(c *clusterv3.Cluster) (minSize, maxSize uint64, err error) {
	if lbp := c.GetLoadBalancingPolicy(); lbp != nil {
		for _, p := range lbp.GetPolicies() {
			a := p.GetTypedExtensionConfig().GetTypedConfig()
			switch a.GetTypeUrl() {
			case "type.googleapis.com/envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash":
				rh := new(ringhashv3.RingHash)
				if err := a.UnmarshalTo(rh); err != nil {
					return 0, 0, err
				}
				if rh.GetHashFunction() != ringhashv3.RingHash_XX_HASH {
					return 0, 0, errors.New("ring hash: gRPC accepts only XX_HASH")
				}
				return sizeOr(rh.GetMinimumRingSize().GetValue(), defaultMinRingSize),
					sizeOr(rh.GetMaximumRingSize().GetValue(), defaultMaxRingSize), nil
			case "type.googleapis.com/envoy.extensions.load_balancing_policies.maglev.v3.Maglev":
				continue // gRPC has no Maglev: it takes the next policy
			}
			return 0, 0, ErrNotHashing
		}
		return 0, 0, errors.New("no load-balancing policy gRPC knows")
	}
	if c.GetLbPolicy() != clusterv3.Cluster_RING_HASH {
		return 0, 0, ErrNotHashing
	}
	rh := c.GetRingHashLbConfig()
	if rh.GetHashFunction() != clusterv3.Cluster_RingHashLbConfig_XX_HASH {
		return 0, 0, errors.New("ring hash: gRPC accepts only XX_HASH")
	}
	return sizeOr(rh.GetMinimumRingSize().GetValue(), defaultMinRingSize),
		sizeOr(rh.GetMaximumRingSize().GetValue(), defaultMaxRingSize), nil
}

func sizeOr(v, def uint64) uint64 {
	if v == 0 {
		return def
	}
	return v
}

// grpcTable is the ring a gRPC client builds over cla's endpoints of
// priority 0 that are HEALTHY or UNKNOWN.
func grpcTable(client Client, cluster string, cla *endpointv3.ClusterLoadAssignment, minSize, maxSize uint64) (*Table, error) {
	n := 0
	for _, lle := range cla.GetEndpoints() {
		if lle.GetPriority() != 0 {
			return nil, fmt.Errorf("%s: priority %d is not modelled", cla.GetClusterName(), lle.GetPriority())
		}
		n += len(lle.GetLbEndpoints())
	}
	t := &Table{Cluster: cluster, Hosts: make([]string, 0, n)}
	eps := make([]ringhash.Endpoint, 0, n)
	on := make([]int32, 0, n) // host of each endpoint on the ring
	for _, lle := range cla.GetEndpoints() {
		lw := uint64(lle.GetLoadBalancingWeight().GetValue())
		for _, e := range lle.GetLbEndpoints() {
			ep := e.GetEndpoint()
			if ep == nil {
				return nil, fmt.Errorf("%s: named endpoints are not modelled", cla.GetClusterName())
			}
			// Only a string hash_key counts; else the address.
			id := e.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue()
			addr := ""
			if id == "" || client == GRPCJS {
				addr = address(ep)
			}
			if id == "" {
				id = addr
			}
			t.Hosts = append(t.Hosts, id)
			if s := e.GetHealthStatus(); s != corev3.HealthStatus_HEALTHY && s != corev3.HealthStatus_UNKNOWN {
				continue
			}
			key := id
			if client == GRPCJS {
				key = addr
			}
			// Locality weight × endpoint weight (ringhash.Product); an
			// endpoint without a weight weighs 1.
			w := max(uint64(e.GetLoadBalancingWeight().GetValue()), 1)
			eps = append(eps, ringhash.Endpoint{HashKey: key, Weight: lw * w})
			on = append(on, int32(len(t.Hosts)-1))
		}
	}
	if len(eps) == 0 {
		return t, nil
	}
	var r *ringhash.Ring
	if client == GRPCJS {
		r = ringhash.BuildOrdered(eps, minSize, maxSize)
	} else {
		r = ringhash.Build(eps, minSize, maxSize)
	}
	t.Hashes = make([]uint64, len(r.Entries))
	t.Owners = make([]int32, len(r.Entries))
	for i, e := range r.Entries {
		t.Hashes[i], t.Owners[i] = e.Hash, on[e.Endpoint]
	}
	return t, nil
}

// address is an endpoint's socket address as grpc-js prints it
// (subchannelAddressToString): host:port, [host]:port for IPv6, the host
// as served.
func address(ep *endpointv3.Endpoint) string {
	sa := ep.GetAddress().GetSocketAddress()
	port := strconv.FormatUint(uint64(sa.GetPortValue()), 10)
	if a, err := netip.ParseAddr(sa.GetAddress()); err == nil && a.Is6() {
		return "[" + sa.GetAddress() + "]:" + port
	}
	return sa.GetAddress() + ":" + port
}
