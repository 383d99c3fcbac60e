package translate

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	lbcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/common/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	maglevv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kvxds/kvxds/fleet"
)

// Names of the typed extensions of the load-balancing policies.
const (
	maglevPolicyName       = "envoy.load_balancing_policies.maglev"
	ringHashPolicyName     = "envoy.load_balancing_policies.ring_hash"
	roundRobinPolicyName   = "envoy.load_balancing_policies.round_robin"
	leastRequestPolicyName = "envoy.load_balancing_policies.least_request"
)

// connectTimeout bounds TCP connection set-up to a replica (Envoy only;
// gRPC ignores it).
const connectTimeout = 5 * time.Second

// buildClusters returns p's cluster and, if it has one, its keyless
// cluster: the same endpoints (the same ClusterLoadAssignment, so weights
// and health stay one EDS resource) under round robin or least request.
// Proxyless gRPC clients get a hash cluster of their own whose ring size
// follows the pool's healthy weight (see fleet.GRPCRingSize).
func buildClusters(p *fleet.Pool, pl *fleet.Plan, kind Kind) ([]*clusterv3.Cluster, error) {
	groups, err := groupClusters(p, pl, kind)
	if err != nil {
		return nil, err
	}
	p = poolView(p, pl, kind)
	var c *clusterv3.Cluster
	switch {
	case kind == GRPCNoHash && p.Balancer == fleet.ConsistentHash:
		c, err = noHashCluster(p)
	case kind.proxyless() && p.Balancer == fleet.ConsistentHash:
		c, err = grpcHashCluster(p, pl.PerWeight)
	default:
		c, err = buildCluster(p, p.Name, "", pl.EnvoyRingSize)
	}
	if err != nil {
		return nil, err
	}
	name := keylessCluster(p, kind)
	if name == "" {
		return append([]*clusterv3.Cluster{c}, groups...), nil
	}
	kp := *p
	kp.Balancer = p.Hash.Keyless
	k, err := buildCluster(&kp, name, p.Name, 0)
	if err != nil {
		return nil, fmt.Errorf("keyless: %w", err)
	}
	return append([]*clusterv3.Cluster{c, k}, groups...), nil
}

// keylessCluster is the name of p's keyless cluster for kind, or "" if
// it has none.
//
// grpc-js gets none: it shares subchannels between the clusters of a
// channel, and once the keyless cluster's balancer has connected an
// endpoint, grpc-js's ring hash stalls on it (its picker starts the
// endpoint's connection from inside a pick, is told synchronously that it
// is ready, and queues the pick after the only update it will get). Its
// keyless requests take a random hash on the ring instead.
func keylessCluster(p *fleet.Pool, kind Kind) string {
	if p.Balancer != fleet.ConsistentHash || p.Hash.Keyless == fleet.Random || kind == GRPCJS {
		return ""
	}
	return p.Name + fleet.KeylessSuffix
}

// buildCluster builds the cluster called name that balances as p says over
// the endpoints of ClusterLoadAssignment serviceName ("": name itself),
// with Envoy's ring sized to envoyRingSize when it is not 0
// (fleet.Plan.EnvoyRingSize).
//
// It uses load_balancing_policy, not the legacy lb_policy enum (gRPC NACKs
// lb_policy MAGLEV). Each client takes the first policy of the list it
// supports: Envoy takes Maglev, gRPC (which has no Maglev) takes RingHash
// on the same keys and the same endpoint hash keys.
func buildCluster(p *fleet.Pool, name, serviceName string, envoyRingSize uint64) (*clusterv3.Cluster, error) {
	policies, err := lbPolicies(p, envoyRingSize)
	if err != nil {
		return nil, err
	}
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: serviceName},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LoadBalancingPolicy:  &clusterv3.LoadBalancingPolicy{Policies: policies},
	}
	if err := c.ValidateAll(); err != nil {
		return nil, err
	}
	return c, nil
}

// lbPolicies is a pool's load_balancing_policy list; each client takes the
// first policy it supports. A ring hash of entries per weight takes
// envoyRingSize (the plan's) as its minimum and maximum.
func lbPolicies(p *fleet.Pool, envoyRingSize uint64) ([]*clusterv3.LoadBalancingPolicy_Policy, error) {
	single := func(name string, m validator) ([]*clusterv3.LoadBalancingPolicy_Policy, error) {
		a, err := typed(m)
		if err != nil {
			return nil, err
		}
		return []*clusterv3.LoadBalancingPolicy_Policy{{
			TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: name, TypedConfig: a},
		}}, nil
	}
	switch p.Balancer {
	case fleet.RoundRobin:
		return single(roundRobinPolicyName, &roundrobinv3.RoundRobin{})
	case fleet.LeastRequest:
		// Round robin follows for the clients without least request
		// (grpc-js NACKs a list it knows nothing of).
		lr, err := single(leastRequestPolicyName, &leastrequestv3.LeastRequest{})
		if err != nil {
			return nil, err
		}
		rr, err := single(roundRobinPolicyName, &roundrobinv3.RoundRobin{})
		if err != nil {
			return nil, err
		}
		return append(lr, rr...), nil
	}
	var chc *lbcommonv3.ConsistentHashingLbConfig
	if p.Hash.BalanceFactor != 0 {
		chc = &lbcommonv3.ConsistentHashingLbConfig{HashBalanceFactor: wrapperspb.UInt32(p.Hash.BalanceFactor)}
	}
	var policies []*clusterv3.LoadBalancingPolicy_Policy
	if p.Hash.Algorithm == fleet.Maglev {
		mg, err := typed(&maglevv3.Maglev{
			TableSize:                 wrapperspb.UInt64(p.Hash.TableSize),
			ConsistentHashingLbConfig: chc,
		})
		if err != nil {
			return nil, err
		}
		policies = append(policies, &clusterv3.LoadBalancingPolicy_Policy{
			TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: maglevPolicyName, TypedConfig: mg},
		})
	}
	// XX_HASH: gRPC NACKs anything else (DEFAULT_HASH included). Ring
	// sizes only when the pool sets them: some gRPC implementations reject
	// an explicit minimum.
	rh := &ringhashv3.RingHash{
		HashFunction:              ringhashv3.RingHash_XX_HASH,
		ConsistentHashingLbConfig: chc,
	}
	if p.Hash.MinRingSize != 0 {
		rh.MinimumRingSize = wrapperspb.UInt64(p.Hash.MinRingSize)
	}
	if p.Hash.MaxRingSize != 0 {
		rh.MaximumRingSize = wrapperspb.UInt64(p.Hash.MaxRingSize)
	}
	// A ring of fixed entries per unit of healthy weight: the cluster
	// follows membership, health and weights, as gRPC clients' does.
	if envoyRingSize != 0 {
		rh.MinimumRingSize = wrapperspb.UInt64(envoyRingSize)
		rh.MaximumRingSize = wrapperspb.UInt64(envoyRingSize)
	}
	rha, err := typed(rh)
	if err != nil {
		return nil, err
	}
	policies = append(policies, &clusterv3.LoadBalancingPolicy_Policy{
		TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: ringHashPolicyName, TypedConfig: rha},
	})
	return policies, nil
}

// grpcHashCluster is p's hash cluster for proxyless gRPC clients: the
// legacy lb_policy RING_HASH with ring_hash_lb_config, the one form in
// which both grpc-go and grpc-js read ring sizes (grpc-js rejects the
// typed RingHash's minimum_ring_size, a uint64 it receives as a string).
// The ring size follows the healthy weight, so this cluster changes with
// membership and health; gRPC clients ignore hash_balance_factor.
func grpcHashCluster(p *fleet.Pool, perWeight uint64) (*clusterv3.Cluster, error) {
	rh := &clusterv3.Cluster_RingHashLbConfig{HashFunction: clusterv3.Cluster_RingHashLbConfig_XX_HASH}
	if size := fleet.RingSize(fleet.RingWeight(p.Endpoints), perWeight, p.Hash.GRPCRingCap); size != 0 {
		rh.MinimumRingSize = wrapperspb.UInt64(size)
		rh.MaximumRingSize = wrapperspb.UInt64(size)
	}
	c := &clusterv3.Cluster{
		Name:                 p.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LbPolicy:             clusterv3.Cluster_RING_HASH,
		LbConfig:             &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: rh},
	}
	if err := c.ValidateAll(); err != nil {
		return nil, err
	}
	return c, nil
}

// noHashCluster is p's hash cluster for a client that crashes on a ring
// hash: the same name and endpoints, balanced like p's keyless cluster
// (round robin where keyless requests hash at random). Routes keep their
// hash policies, which these balancers ignore.
func noHashCluster(p *fleet.Pool) (*clusterv3.Cluster, error) {
	kp := *p
	kp.Balancer = p.Hash.Keyless
	if kp.Balancer == fleet.Random || kp.Balancer == "" {
		kp.Balancer = fleet.RoundRobin
	}
	return buildCluster(&kp, p.Name, "", 0)
}

// Tenant hash groups.
//
// A group (fleet.Group) of pool P gets, for every kind:
//
//   - one route per value, before the pool's own routes, matching the
//     group's header exactly (string_match exact, which Envoy, grpc-go and
//     grpc-js read) and sending the request to cluster "P/group/NAME" with
//     the pool's hash policies, less any key on the group's own header:
//     that header is what selects the group, so within a single-value
//     group it would send every request to one replica. A request of the
//     group without a key is hashed on a random value (Envoy's and gRPC's
//     behaviour without a hash), so it never leaves the group's replicas;
//     a group has no keyless cluster;
//   - a cluster "P/group/NAME" shaped like the pool's hash cluster for the
//     kind (Maglev then ring hash for Envoy, the sized ring hash for
//     gRPC, with fleet.GroupEntriesPerWeight entries per unit of weight), over
//     its own ClusterLoadAssignment "P/group/NAME": the group's members
//     with their weights, health and hash keys.
//
// Members are chosen by the model (fleet.GroupMembers, fleet.Plan): the
// same for every kind, computed once per push. An exclusive group's
// members leave the pool's own assignment (and so its hash and keyless
// clusters), unless no healthy replica would be left there; the mesh
// assignment keeps the whole pool. grpc-js gets no group clusters: its
// groups' requests hash over the whole pool (see groupTables).

// groupTables reports whether kind gets the groups' own clusters and
// assignments.
//
// Envoy and gRPC: every group has its cluster, and the pool's own
// assignment leaves out the members of its exclusive groups, unless that
// leaves no healthy replica (fleet.Plan).
//
// grpc-js: no group has a cluster; the groups' routes go to the pool's
// cluster, over the whole pool. grpc-js cannot hold two ring hash
// clusters in one channel safely. It shares subchannels between them, and
// a ring hash stalls on an endpoint another cluster already connected
// (see keylessCluster). And its xDS client hands every cluster of the
// channel the whole configuration again for each changed resource, while
// its ring hash builds its ring from the first of two address lists it
// gets in one event-loop turn after forgetting the endpoints the second
// drops: one endpoint response that changes two clusters (a member
// draining changes both the group's and the pool's) throws an uncaught
// error in the client, which ends the process (@grpc/grpc-js-xds 1.14.1,
// load-balancer-ring-hash.js constructRing). With one cluster it never
// sees such a response, and its routes and clusters never follow
// membership.
func groupTables(kind Kind) bool { return kind != GRPCJS }

// servesTables reports whether kind's clients get p's group and adapter
// clusters: not where Envoy picks each request's replica itself (Picks),
// whose pick table places the adapters (fleet.AdapterPick) and which has
// no groups.
func servesTables(p *fleet.Pool, kind Kind) bool { return !Picks(p, kind) }

// poolView is p as its own clusters and assignment see it for kind: the
// plan's own table, or the whole pool for a kind without group tables.
func poolView(p *fleet.Pool, pl *fleet.Plan, kind Kind) *fleet.Pool {
	if !groupTables(kind) || len(pl.Endpoints) == len(p.Endpoints) {
		return p
	}
	v := *p
	v.Endpoints = pl.Endpoints
	return &v
}

// groupPool is p restricted to members, under a table's cluster name
// (a group's or an adapter's): what the table's cluster and assignment
// are built from.
func groupPool(p *fleet.Pool, cluster string, members []fleet.Endpoint) *fleet.Pool {
	gp := *p
	gp.Name = cluster
	gp.Endpoints = members
	gp.Groups = nil
	gp.Mesh = nil
	gp.LoRA, gp.Adapters = nil, nil
	return &gp
}

// groupClusters returns the clusters of p's groups and adapters for
// kind: each shaped like the pool's hash cluster for the kind, over the
// table's members.
func groupClusters(p *fleet.Pool, pl *fleet.Plan, kind Kind) ([]*clusterv3.Cluster, error) {
	if !groupTables(kind) || !servesTables(p, kind) {
		return nil, nil
	}
	var clusters []*clusterv3.Cluster
	for _, t := range pl.Tables() {
		gp := groupPool(p, t.Cluster, t.Members)
		var c *clusterv3.Cluster
		var err error
		switch {
		case kind == GRPCNoHash:
			c, err = noHashCluster(gp)
		case kind.proxyless():
			c, err = grpcHashCluster(gp, t.PerWeight)
		default:
			c, err = buildCluster(gp, gp.Name, "", t.EnvoyRingSize)
		}
		if err != nil {
			return nil, fmt.Errorf("table %q: cluster: %w", t.Cluster, err)
		}
		clusters = append(clusters, c)
	}
	return clusters, nil
}

// MeshCluster returns the Envoy cluster that takes pool's mesh assignment
// from eds, for an Envoy configured by something other than kvxds: named
// after the mesh cluster, of type EDS, balancing with the pool's
// load_balancing_policy exactly as kvxds's own Envoy cluster of the pool
// (Maglev with the same table size and balance factor, then ring hash).
// The cluster passes its ValidateAll.
func MeshCluster(m fleet.Model, pool string, eds *corev3.ConfigSource) (*clusterv3.Cluster, error) {
	if err := check(m, Envoy); err != nil {
		return nil, err
	}
	f := m.Fleet()
	i := slices.IndexFunc(f.Pools, func(p fleet.Pool) bool { return p.Name == pool })
	if i < 0 {
		return nil, fmt.Errorf("translate: no pool %q", pool)
	}
	p := &f.Pools[i]
	if p.Mesh == nil {
		return nil, fmt.Errorf("translate: pool %q has no mesh cluster", pool)
	}
	if p.Hash.EntriesPerWeight != 0 {
		// Its ring size follows membership; a cluster another control
		// plane holds would keep the size it was printed with.
		return nil, fmt.Errorf("translate: pool %q sizes its ring by entries per weight, which a mesh's cluster cannot follow", pool)
	}
	policies, err := lbPolicies(p, 0) // a mesh's pool has no entries per weight
	if err != nil {
		return nil, resErr(p, "mesh cluster", err)
	}
	c := &clusterv3.Cluster{
		Name:                 p.Mesh.ClusterName,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: eds},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LoadBalancingPolicy:  &clusterv3.LoadBalancingPolicy{Policies: policies},
	}
	if err := c.ValidateAll(); err != nil {
		return nil, resErr(p, "mesh cluster", err)
	}
	return c, nil
}

// sortedClusters flattens per-pool clusters, sorted by name like every
// other type ("a-b" sorts before "a/keyless").
func sortedClusters(perPool [][]*clusterv3.Cluster) []*clusterv3.Cluster {
	out := slices.Concat(perPool...)
	slices.SortFunc(out, func(a, b *clusterv3.Cluster) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out
}
