package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Model is a fleet ready to serve: normalised, valid, within the limits
// of every client, and with each pool's Plan. Only Prepare makes one, so
// that a push normalises, validates and plans its fleet once, whatever it
// builds from it, for whichever kind of client.
type Model struct {
	f        Fleet
	plans    []Plan // by pool, in f.Pools order
	drops    []HotKeyDrop
	adrops   []AdapterDrop
	prepared bool
}

// Prepare normalises f (Normalize), drops the hot-key table entries that
// cannot be served (HotKeyDrops says which and why: a bad entry never
// fails a push), validates it (Validate, plus the checks that keep every
// client from NACKing) and plans each pool.
func Prepare(f Fleet) (Model, error) {
	n := f.Normalize()
	var drops []HotKeyDrop
	var adrops []AdapterDrop
	for i := range n.Pools {
		drops = append(drops, dropBadHotKeys(&n.Pools[i])...)
		adrops = append(adrops, dropBadAdapters(&n.Pools[i])...)
	}
	if err := n.Validate(); err != nil {
		return Model{}, fmt.Errorf("fleet: invalid fleet: %w", err)
	}
	var errs []error
	for i := range n.Pools {
		if err := checkClients(&n.Pools[i]); err != nil {
			errs = append(errs, fmt.Errorf("pool %q: %w", n.Pools[i].Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Model{}, fmt.Errorf("fleet: invalid fleet: %w", err)
	}
	// Prefill tables are read off the prefill pools as normalised (sorted
	// by name, so found by search).
	for i := range n.Pools {
		p := &n.Pools[i]
		if p.Prefill == nil {
			continue
		}
		j, _ := slices.BinarySearchFunc(n.Pools, p.Prefill.Pool, func(q Pool, name string) int { return cmp.Compare(q.Name, name) })
		p.PrefillTable = NewSlotTable(&n.Pools[j], p)
	}
	plans := make([]Plan, len(n.Pools))
	for i := range n.Pools {
		plans[i] = planPool(&n.Pools[i])
	}
	return Model{f: n, plans: plans, drops: drops, adrops: adrops, prepared: true}, nil
}

// HotKeyDrops are the hot-key table entries Prepare left out, by pool in
// name order, then in table order. Callers must not modify them.
func (m Model) HotKeyDrops() []HotKeyDrop { return m.drops }

// AdapterDrops are the adapters Prepare left out, by pool in name order,
// then by adapter name. Callers must not modify them.
func (m Model) AdapterDrops() []AdapterDrop { return m.adrops }

// Fleet returns the normalised fleet. Callers must not modify it.
func (m Model) Fleet() Fleet { return m.f }

// Prepared reports whether Prepare made m (a zero Model was never
// normalised or validated).
func (m Model) Prepared() bool { return m.prepared }

// Plan returns the plan of the pool named pool, or a zero Plan if there
// is none. Callers must not modify it.
func (m Model) Plan(pool string) Plan {
	i, ok := slices.BinarySearchFunc(m.f.Pools, pool, func(p Pool, name string) int { return cmp.Compare(p.Name, name) })
	if !ok {
		return Plan{}
	}
	return m.plans[i]
}

// Equal reports whether m and o hold the same fleet (plans follow from it).
func (m Model) Equal(o Model) bool {
	return m.prepared == o.prepared && reflect.DeepEqual(m.f, o.f)
}

// Plan is how a pool's replicas divide into hash tables: the pool's own
// table and each tenant group's, with the ring sizing of proxyless gRPC
// clients. It is the same for every kind of client; a client that cannot
// hold group clusters (grpc-js, see xds/translate) hashes its groups'
// requests over the whole pool instead.
type Plan struct {
	// Endpoints are the pool's own table: the pool's endpoints less the
	// members of its exclusive groups, unless that would leave it no
	// healthy replica (then all of them).
	Endpoints []Endpoint
	// PerWeight is the gRPC ring entries per unit of weight of the pool's
	// own table (EntriesPerWeight).
	PerWeight uint64
	// EnvoyRingSize is the ring size (minimum and maximum alike) of
	// Envoy's ring over the pool's own table when the pool sets
	// Hash.EntriesPerWeight (EnvoyRingSize of Endpoints); 0 otherwise,
	// and when no weight is healthy (Envoy's ring then takes the pool's
	// sizes or its defaults).
	EnvoyRingSize uint64
	// Groups are the pool's groups, in Pool.Groups order.
	Groups []GroupPlan
	// Adapters are the pool's placed adapters, in Pool.Adapters order.
	Adapters []AdapterPlan
	// Domains are, by identity, the replicas that serve only in one
	// exclusive group's table, each with that group's name (nil if no
	// exclusive group took a replica out): their weights divide that table
	// alone, so relative weights measure them against each other
	// (weights.StepDomains). Every other replica, including the members of
	// groups that are not exclusive, serves in the pool's own table and is
	// in the pool's domain. Clients without group tables (grpc-js) hash
	// over the whole pool with weights measured so.
	Domains map[string]string
	// Rings are the hash tables grpc-go (and the other gRPC languages but
	// grpc-js) build for the pool: the pool's own, then each group's,
	// then each adapter's.
	Rings []RingTable
}

// GroupPlan is one tenant group's table.
type GroupPlan struct {
	// Cluster names the group's cluster and assignment (Group.ClusterName).
	Cluster string
	// Members are the group's replicas (GroupMembers), in hash key order.
	Members []Endpoint
	// PerWeight is the gRPC ring entries per unit of weight of the
	// group's table (GroupEntriesPerWeight).
	PerWeight uint64
	// EnvoyRingSize is Plan.EnvoyRingSize for the group's table.
	EnvoyRingSize uint64
}

// RingTable is one hash table gRPC clients build for a pool: the pool's
// own, or a tenant group's (Cluster names it), over Endpoints, with
// PerWeight ring entries per unit of healthy weight.
type RingTable struct {
	Cluster   string
	Endpoints []Endpoint
	PerWeight uint64
}

// Tenant hash group membership.
//
// Members are chosen by rendezvous (highest-random-weight) hashing: every
// replica of the pool is ranked by xxhash64(group name + "\x00" +
// identity), highest first, and the group takes replicas in rank order
// until it holds Replicas healthy ones. A replica that is draining
// (saturated: the escape hatch), degraded or unhealthy keeps its place in
// the ranking and in the assignment, with its health, so it gets no new
// requests while the next-ranked healthy replica fills in; when it
// recovers it takes its place back and that replica leaves. A replica
// joining or leaving the pool changes the group only if it ranks among
// the group's members: at most one member in, one out. The ranking uses
// identities alone, not weights, so metric-driven weight changes never
// move membership (weights still apply inside the group). A pool with
// fewer healthy replicas than Replicas gives the group all of them.
//
// An exclusive group's members leave the pool's own table (and so its
// hash and keyless clusters), unless no healthy replica would be left
// there; the mesh assignment keeps the whole pool.

// rendezvousScore is an endpoint's weight in group's ranking.
func rendezvousScore(group, identity string) uint64 {
	return xxhash.Sum64String(group + "\x00" + identity)
}

// GroupMembers returns the members of g in the normalised pool p (hash
// key order): every replica ranked at or above g's Replicas-th healthy
// one, or all of them if fewer are healthy.
func GroupMembers(p *Pool, g Group) []Endpoint {
	type ranked struct {
		score uint64
		i     int
	}
	rs := make([]ranked, len(p.Endpoints))
	for i := range p.Endpoints {
		rs[i] = ranked{rendezvousScore(g.Name, p.Endpoints[i].HashKey), i}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(p.Endpoints[a.i].HashKey, p.Endpoints[b.i].HashKey))
	})
	var idx []int
	healthy := 0
	for _, r := range rs {
		if healthy == g.Replicas {
			break
		}
		idx = append(idx, r.i)
		if p.Endpoints[r.i].Health == Healthy {
			healthy++
		}
	}
	slices.Sort(idx)
	out := make([]Endpoint, len(idx))
	for j, i := range idx {
		out[j] = p.Endpoints[i]
	}
	return out
}

// planPool plans the normalised pool p.
func planPool(p *Pool) Plan {
	plan := Plan{Endpoints: p.Endpoints, PerWeight: EntriesPerWeight(p.Hash.GRPCRingCap)}
	out := map[string]bool{}
	if len(p.Groups) > 0 {
		plan.Groups = make([]GroupPlan, len(p.Groups))
	}
	for i, g := range p.Groups {
		ms := GroupMembers(p, g)
		plan.Groups[i] = GroupPlan{Cluster: g.ClusterName(p.Name), Members: ms,
			PerWeight:     GroupEntriesPerWeight(g.Replicas, g.MemberWeight, p.Hash.GRPCRingCap),
			EnvoyRingSize: envoyRingSize(p, ms)}
		if g.Exclusive {
			for _, e := range ms {
				out[e.HashKey] = true
			}
		}
	}
	var rest []Endpoint
	healthy := false
	for _, e := range p.Endpoints {
		if !out[e.HashKey] {
			rest = append(rest, e)
			healthy = healthy || e.Health == Healthy
		}
	}
	if healthy && len(rest) < len(p.Endpoints) {
		plan.Endpoints = rest
		plan.Domains = map[string]string{}
		for i, g := range p.Groups {
			if !g.Exclusive {
				continue
			}
			for _, e := range plan.Groups[i].Members {
				if _, taken := plan.Domains[e.Identity()]; !taken {
					plan.Domains[e.Identity()] = g.Name
				}
			}
		}
	}
	plan.EnvoyRingSize = envoyRingSize(p, plan.Endpoints)
	plan.Adapters = planAdapters(p)
	plan.Rings = make([]RingTable, 0, 1+len(p.Groups)+len(plan.Adapters))
	plan.Rings = append(plan.Rings, RingTable{Cluster: p.Name, Endpoints: plan.Endpoints, PerWeight: plan.PerWeight})
	for _, g := range plan.Tables() {
		plan.Rings = append(plan.Rings, RingTable{Cluster: g.Cluster, Endpoints: g.Members, PerWeight: g.PerWeight})
	}
	return plan
}

// Tables are the pool's tables besides its own: each group's, then each
// adapter's. Both are served alike (a cluster and an assignment each).
func (pl Plan) Tables() []GroupPlan {
	out := slices.Clone(pl.Groups)
	for _, a := range pl.Adapters {
		out = append(out, a.GroupPlan)
	}
	return out
}

// envoyRingSize is the size of Envoy's ring over eps, a table of p: 0
// unless p sizes it by entries per weight.
func envoyRingSize(p *Pool, eps []Endpoint) uint64 {
	if p.Balancer != ConsistentHash || p.Hash.EntriesPerWeight == 0 {
		return 0
	}
	return EnvoyRingSize(eps, p.Hash.EntriesPerWeight)
}
