// Package translate turns kvxds's fleet model into xDS resources for stock
// Envoy and for proxyless gRPC clients.
//
// Contract:
//
//   - fleet.Prepare normalises, validates and plans a fleet once into a
//     fleet.Model: which replicas each hash table holds (fleet.Plan) is
//     the model's, the same for every kind of client. Translate is a pure
//     function of a fleet.Model and a Kind: it builds, per pool P, one
//     Listener, one RouteConfiguration, one Cluster and one
//     ClusterLoadAssignment, all named P, and for a consistent-hashing
//     pool (except for grpc-js) a second Cluster "P/keyless" over the same
//     ClusterLoadAssignment for requests that carry no hash key; a pool
//     with a mesh cluster (fleet.Mesh) also gets a ClusterLoadAssignment
//     under the mesh's cluster name, for another control plane's cluster
//     (MeshCluster); each tenant group of a pool gets a route per value, a
//     cluster and a ClusterLoadAssignment "P/group/NAME" (groupTables). It
//     never does I/O and never panics; an invalid fleet or a resource
//     failing its ValidateAll gives an error naming the pool and resource.
//     Independent pools may be built on several goroutines; nothing is
//     shared between calls.
//   - Output is deterministic: equal fleets, whatever the order of their
//     pools and endpoints, give byte-identical resources under
//     proto.MarshalOptions{Deterministic: true}, and so equal Versions.
//   - Each Kind gets its own resources. Envoy gets a real listener on the
//     pool's address and Maglev (or a ring hash, sized like gRPC clients'
//     with entries_per_weight); proxyless gRPC clients get an API listener
//     named P (clients dial xds:///P) and a ring hash whose size follows
//     the pool's healthy weight (fleet.GRPCRingSize), so that membership changes
//     move only the keys of the replicas that join or leave, and each
//     pool as one locality, so that every gRPC implementation weighs its
//     endpoints alike (see buildEndpoints); grpc-js gets no keyless
//     cluster (see keylessCluster).
//   - Snapshot gives each resource type its own content version, so a
//     change of endpoint weights, health or membership only bumps the EDS
//     version, and the CDS version when a ring size changes: for gRPC
//     kinds, and for Envoy in pools with entries_per_weight. Retranslate is the fast path for such changes.
//   - Resources are treated as immutable once returned: callers must not
//     modify them (they may be shared between snapshots).
//
// Clients are expected to fetch everything over ADS (xDS v3).
//
// Each resource type is built in its own file: listeners.go (listeners,
// the HTTP connection manager and its body-key filter), routes.go,
// clusters.go and endpoints.go; bodykeys.go holds the body-key filter
// itself, snapshot.go the versioned snapshots and yaml.go their rendering.
package translate

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/kvxds/kvxds/fleet"
)

// Kind is the kind of xDS client. Envoy and proxyless gRPC clients
// differ in their listeners and in how they hash (Maglev in Envoy, a ring
// sized to the membership in gRPC); grpc-js differs from the other gRPC
// clients in two limits of its own (see keylessCluster and
// buildEndpoints).
type Kind int

const (
	// Envoy is a stock Envoy proxy: one TCP listener per pool.
	Envoy Kind = iota
	// GRPC is a proxyless gRPC client (grpc-go, grpc-java, C-core): one
	// API listener per pool.
	GRPC
	// GRPCJS is grpc-js (@grpc/grpc-js-xds), a proxyless gRPC client.
	GRPCJS
	// GRPCNoHash is a gRPC client whose version is known to crash on a
	// ring hash: GRPC's resources, with every hash cluster balancing
	// like the pool's keyless cluster instead. It loses affinity, nothing
	// else.
	GRPCNoHash
)

// Kinds lists every kind, in the order snapshots are built.
var Kinds = []Kind{Envoy, GRPC, GRPCJS, GRPCNoHash}

// sharesEndpoints maps a kind to an earlier one of Kinds whose
// ClusterLoadAssignments it receives unchanged. (Envoy keeps a pool's
// localities and gRPC clients get one, see buildEndpoints.)
var sharesEndpoints = map[Kind]Kind{GRPCNoHash: GRPC}

func (k Kind) String() string {
	switch k {
	case Envoy:
		return "envoy"
	case GRPC:
		return "grpc"
	case GRPCJS:
		return "grpc-js"
	case GRPCNoHash:
		return "grpc-nohash"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// proxyless reports whether f is a gRPC client.
func (k Kind) proxyless() bool { return k == GRPC || k == GRPCJS || k == GRPCNoHash }

func (k Kind) valid() bool { return k == Envoy || k.proxyless() }

// Resources is everything one kind of client needs. Each slice is
// sorted by resource name. Resources must not be modified once built.
type Resources struct {
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	Clusters  []*clusterv3.Cluster
	Endpoints []*endpointv3.ClusterLoadAssignment

	// mesh names the assignments served for other control planes'
	// clusters (fleet.Mesh), which no cluster of Clusters refers to.
	mesh []string

	// memo memoises Snapshot's per-type work, which is almost all
	// marshalling; Retranslate carries the unchanged types over.
	memo typeMemo
}

// check reports why m cannot be translated for kind, if it cannot.
func check(m fleet.Model, kind Kind) error {
	if !kind.valid() {
		return fmt.Errorf("translate: unknown kind %v", kind)
	}
	if !m.Prepared() {
		return errors.New("translate: the model was not made by fleet.Prepare")
	}
	return nil
}

// Translate returns the resources of m for the given kind, each of which
// passes its ValidateAll.
func Translate(m fleet.Model, kind Kind) (*Resources, error) {
	if err := check(m, kind); err != nil {
		return nil, err
	}
	f := m.Fleet()
	n := &f
	r := &Resources{
		Listeners: make([]*listenerv3.Listener, len(n.Pools)),
		Routes:    make([]*routev3.RouteConfiguration, len(n.Pools)),
		mesh:      meshClusters(n),
	}
	clusters := make([][]*clusterv3.Cluster, len(n.Pools))
	endpoints := make([][]*endpointv3.ClusterLoadAssignment, len(n.Pools))
	err := parallel(len(n.Pools), func(i int) error {
		p := &n.Pools[i]
		pl := m.Plan(p.Name)
		var err error
		if r.Listeners[i], err = buildListener(p, kind); err != nil {
			return resErr(p, "listener", err)
		}
		if r.Routes[i], err = buildRoute(p, &pl, kind); err != nil {
			return resErr(p, "route configuration", err)
		}
		if clusters[i], err = buildClusters(p, &pl, kind); err != nil {
			return resErr(p, "cluster", err)
		}
		if endpoints[i], err = poolEndpoints(p, &pl, kind); err != nil {
			return resErr(p, "cluster load assignment", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.Clusters = sortedClusters(clusters)
	r.Endpoints = sortedAssignments(endpoints)
	return r, nil
}

// Retranslate is the fast path of Translate for a model that differs from
// the one prev was translated from only in its endpoints (membership,
// weights, health): it rebuilds the ClusterLoadAssignments and, for
// proxyless gRPC kinds and pools with entries_per_weight, the clusters
// (their ring size follows the healthy weight), and shares prev's
// listeners and routes, already
// versioned. The result equals Translate(m, kind). If anything else may
// have changed, use Translate.
func Retranslate(prev *Resources, m fleet.Model, kind Kind) (*Resources, error) {
	if err := check(m, kind); err != nil {
		return nil, err
	}
	return retranslate(prev, m, kind, nil)
}

// RetranslateAll is Retranslate for every kind of prev (keyed by
// kind, each from the same previous model): kinds that receive the same
// ClusterLoadAssignments (sharesEndpoints) share them and their
// marshalling. This is the path of every weight, health and membership
// change.
func RetranslateAll(prev map[Kind]*Resources, m fleet.Model) (map[Kind]*Resources, error) {
	if err := check(m, Envoy); err != nil {
		return nil, err
	}
	out := make(map[Kind]*Resources, len(Kinds))
	for _, kind := range Kinds {
		var same *Resources
		if from, ok := sharesEndpoints[kind]; ok {
			same = out[from]
		}
		var err error
		if out[kind], err = retranslate(prev[kind], m, kind, same); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RetranslateLoad is the fast path of Translate, for every kind of prev
// (keyed by kind, each from the same previous model), for a model that
// differs from prev's only in what its slot tables carry of the replicas'
// load: the Envoys' bytes and adapters in flight, when they were counted
// (Pool.LoadAt), and the replicas' prefix-cache hit rates, in the pools
// that moved names (a decode pool's table carries its prefill pool's
// load). Those ride only in the pick and prefill tables of Envoy's route
// configurations, so Envoy's routes of those pools are rebuilt; Envoy's
// other routes, listeners, clusters and assignments are shared with prev
// (and their marshalling), and every other kind is served prev's
// resources as they are. This is the path of a load push, once per load
// interval while a pool's load moves. The result equals Translate(m,
// kind) for each kind (TestRetranslateLoad). If anything else may have
// changed, use Translate.
func RetranslateLoad(prev map[Kind]*Resources, m fleet.Model, moved map[string]bool) (map[Kind]*Resources, error) {
	if err := check(m, Envoy); err != nil {
		return nil, err
	}
	out := make(map[Kind]*Resources, len(prev))
	for kind, r := range prev {
		if kind != Envoy {
			out[kind] = r
			continue
		}
		f := m.Fleet()
		n := &f
		nr := &Resources{
			Listeners: r.Listeners,
			Routes:    slices.Clone(r.Routes),
			Clusters:  r.Clusters,
			Endpoints: r.Endpoints,
			mesh:      r.mesh,
		}
		if len(nr.Routes) != len(n.Pools) {
			return nil, fmt.Errorf("translate: %d route configurations for %d pools", len(nr.Routes), len(n.Pools))
		}
		for _, t := range []types.ResponseType{types.Listener, types.Cluster, types.Endpoint} {
			nr.memo.cells[t] = r.memo.cell(t)
		}
		err := parallel(len(n.Pools), func(i int) error {
			p := &n.Pools[i]
			if !moved[p.Name] {
				return nil
			}
			if nr.Routes[i].GetName() != p.Name {
				return fmt.Errorf("translate: route configuration %q where pool %q was", nr.Routes[i].GetName(), p.Name)
			}
			pl := m.Plan(p.Name)
			var err error
			if nr.Routes[i], err = buildRoute(p, &pl, kind); err != nil {
				return resErr(p, "route configuration", err)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		out[kind] = nr
	}
	return out, nil
}

// ringFollowsWeight reports whether p's Envoy ring is sized by its
// healthy weight (entries_per_weight), so that its Envoy cluster changes
// with membership, health and weights too.
func ringFollowsWeight(p fleet.Pool) bool {
	return p.Balancer == fleet.ConsistentHash && p.Hash.EntriesPerWeight != 0
}

// retranslate is Retranslate of a prepared model; if eps is not nil, its
// ClusterLoadAssignments are this kind's too and are shared, not built.
func retranslate(prev *Resources, m fleet.Model, kind Kind, eps *Resources) (*Resources, error) {
	f := m.Fleet()
	n := &f
	out := &Resources{
		Listeners: prev.Listeners,
		Routes:    prev.Routes,
		Clusters:  prev.Clusters,
		mesh:      meshClusters(n),
	}
	var endpoints [][]*endpointv3.ClusterLoadAssignment
	if eps == nil {
		endpoints = make([][]*endpointv3.ClusterLoadAssignment, len(n.Pools))
	} else {
		out.Endpoints = eps.Endpoints
		out.memo.cells[types.Endpoint] = eps.memo.cell(types.Endpoint)
	}
	var clusters [][]*clusterv3.Cluster
	if kind.proxyless() || slices.ContainsFunc(n.Pools, ringFollowsWeight) {
		clusters = make([][]*clusterv3.Cluster, len(n.Pools))
	}
	err := parallel(len(n.Pools), func(i int) error {
		p := &n.Pools[i]
		pl := m.Plan(p.Name)
		var err error
		if eps == nil {
			if endpoints[i], err = poolEndpoints(p, &pl, kind); err != nil {
				return resErr(p, "cluster load assignment", err)
			}
		}
		if clusters != nil {
			if clusters[i], err = buildClusters(p, &pl, kind); err != nil {
				return resErr(p, "cluster", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if eps == nil {
		out.Endpoints = sortedAssignments(endpoints)
	}
	keep := []types.ResponseType{types.Listener, types.Route, types.Cluster}
	if clusters != nil {
		out.Clusters = sortedClusters(clusters)
		keep = slices.DeleteFunc(keep, func(t types.ResponseType) bool { return t == types.Cluster })
	}
	for _, t := range keep {
		out.memo.cells[t] = prev.memo.cell(t)
	}
	return out, nil
}

func resErr(p *fleet.Pool, what string, err error) error {
	return fmt.Errorf("translate: pool %q: %s: %w", p.Name, what, err)
}

// parallel runs fn(0..n-1) on up to GOMAXPROCS goroutines and returns the
// error of the lowest failing index, so errors are deterministic too. The
// work items are independent: each writes only its own slot.
func parallel(n int, fn func(i int) error) error {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			if err := fn(i); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				errs[i] = fn(i)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// validator is what protoc-gen-validate generates on every message.
type validator interface {
	proto.Message
	ValidateAll() error
}

// typed validates m (ValidateAll does not descend into Any) and packs it
// deterministically.
func typed(m validator) (*anypb.Any, error) {
	if err := m.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	a := new(anypb.Any)
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, err
	}
	return a, nil
}

// adsSource is "fetch it on the same ADS stream, xDS v3", the only config
// source proxyless gRPC accepts besides self.
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}
