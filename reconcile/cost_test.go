package reconcile

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/xds/envoylb"
	"github.com/kvxds/kvxds/xds/ringhash"
	"github.com/kvxds/kvxds/xds/translate"
)

// costFleet is one pool of n replicas of weights 1..4 over two zones.
func costFleet(n int, h fleet.Hash, groups ...fleet.Group) fleet.Fleet {
	h.Keys = []fleet.HashKey{{Header: "x-session-id"}}
	p := fleet.Pool{Name: "chat", Settings: fleet.Settings{Port: 10000, Hash: h, Groups: groups}}
	for i := range n {
		p.Endpoints = append(p.Endpoints, fleet.Endpoint{
			Host: fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), Port: 8000, Weight: uint32(1 + i%4),
			HashKey: fmt.Sprintf("vllm-%03d", i), Locality: fleet.Locality{Zone: string(rune('a' + i%2))},
		})
	}
	return fleet.Fleet{Pools: []fleet.Pool{p}}
}

func mustPrepare(t testing.TB, f fleet.Fleet) fleet.Model {
	t.Helper()
	m, err := fleet.Prepare(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// servedOwner returns, for kind and table, the identity the served
// resources' table gives a hash: Envoy's balancer built by the model from
// the Cluster and assignment, gRPC's ring from the Cluster's ring size
// and the assignment's healthy endpoints, placed by hash_key in hash-key
// order (grpc-js: by address, in the assignment's order). Built
// independently of cost.go and xds/clients.
func servedOwner(t *testing.T, m fleet.Model, kind translate.Kind, table string) (owner func(uint64) string, maglev []string, members map[string]bool) {
	t.Helper()
	res, err := translate.Translate(m, kind)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res.Clusters, func(c *clusterv3.Cluster) bool { return c.GetName() == table })
	j := slices.IndexFunc(res.Endpoints, func(c *endpointv3.ClusterLoadAssignment) bool { return c.GetClusterName() == table })
	if i < 0 || j < 0 {
		t.Fatalf("%v: no cluster or assignment %q", kind, table)
	}
	c, cla := res.Clusters[i], res.Endpoints[j]
	hosts, _, err := envoylb.Hosts(cla)
	if err != nil {
		t.Fatal(err)
	}
	members = map[string]bool{}
	for _, h := range hosts {
		members[h.HashKey] = true
	}
	if kind == translate.Envoy {
		b, err := envoylb.NewBalancer(c, cla)
		if err != nil {
			t.Fatal(err)
		}
		if mt, ok := b.Table.(*envoylb.MaglevTable); ok {
			maglev = make([]string, len(mt.Slots))
			for s, h := range mt.Slots {
				maglev[s] = b.Hosts[h].HashKey
			}
		}
		return func(h uint64) string { return b.Hosts[b.Owner(h)].HashKey }, maglev, members
	}
	var eps []ringhash.Endpoint
	var ids []string
	for _, h := range hosts {
		if h.Health == envoylb.Healthy {
			key := h.HashKey
			if kind == translate.GRPCJS {
				key = h.Address
			}
			eps = append(eps, ringhash.Endpoint{HashKey: key, Weight: uint64(h.Weight)})
			ids = append(ids, h.HashKey)
		}
	}
	size := c.GetRingHashLbConfig().GetMinimumRingSize().GetValue()
	r := ringhash.Build(eps, size, size)
	if kind == translate.GRPCJS {
		r = ringhash.BuildOrdered(eps, size, size)
	}
	return func(h uint64) string { return ids[r.Owner(h)] }, nil, members
}

// TestPushCostMatchesServedTables checks each push's cost against the
// tables built from what kvxds serves: Maglev slot by slot (exactly),
// rings by 200,000 random hashes (within sampling error), for a join, a
// leave, a drain (escape hatch), a weight step and two at once, in a pool
// with an exclusive tenant group (whose fill-ins count as changed in the
// tables they enter or leave).
func TestPushCostMatchesServedTables(t *testing.T) {
	group := fleet.Group{Name: "acme", Header: "x-tenant", Values: []string{"acme"}, Replicas: 3, Exclusive: true}
	for _, h := range []fleet.Hash{{}, {Algorithm: fleet.RingHash, EntriesPerWeight: 64}, {Algorithm: fleet.RingHash}} {
		base := costFleet(16, h, group)
		edits := map[string]struct {
			cause string
			edit  func(p *fleet.Pool)
		}{
			"join": {costMembership, func(p *fleet.Pool) {
				p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: "10.0.9.9", Port: 8000, Weight: 2, HashKey: "vllm-new"})
			}},
			"leave":  {costMembership, func(p *fleet.Pool) { p.Endpoints = slices.Delete(p.Endpoints, 5, 6) }},
			"drain":  {costHealth, func(p *fleet.Pool) { p.Endpoints[7].Health = fleet.Draining }},
			"weight": {costWeight, func(p *fleet.Pool) { p.Endpoints[3].Weight++ }},
			"mixed":  {costMixed, func(p *fleet.Pool) { p.Endpoints[3].Weight++; p.Endpoints[7].Health = fleet.Draining }},
		}
		for name, ch := range edits {
			t.Run(fmt.Sprintf("%s/%s", h.Algorithm, name), func(t *testing.T) {
				next := costFleet(16, h, group)
				next.Pools[0].Endpoints = slices.Clone(next.Pools[0].Endpoints)
				ch.edit(&next.Pools[0])
				ma, mb := mustPrepare(t, base), mustPrepare(t, next)
				pa, pb := ma.Fleet().Pools[0], mb.Fleet().Pools[0]
				c, ok := poolCost(buildTables(ma, &pa), buildTables(mb, &pb), time.Unix(0, 0))
				if !ok || c.cause != ch.cause {
					t.Fatalf("cost %v, %q; want cause %q", ok, c.cause, ch.cause)
				}
				changed, _ := changes(&pa, &pb)
				// grpc-js has no group tables; Envoy and gRPC have the
				// pool's and the group's.
				if len(c.tables) != 5 {
					t.Fatalf("%d tables: %+v", len(c.tables), c.tables)
				}
				for _, tc := range c.tables {
					kind := map[string]translate.Kind{"envoy": translate.Envoy, "grpc": translate.GRPC, "grpc-js": translate.GRPCJS}[tc.kind]
					oa, sa, ina := servedOwner(t, ma, kind, tc.table)
					ob, sb, inb := servedOwner(t, mb, kind, tc.table)
					// Replicas that changed, or entered or left the table.
					changed := maps.Clone(changed)
					for id := range ina {
						changed[id] = changed[id] || !inb[id]
					}
					for id := range inb {
						changed[id] = changed[id] || !ina[id]
					}
					var own, coll float64
					if sa != nil {
						for s := range sa {
							if sa[s] != sb[s] {
								if changed[sa[s]] || changed[sb[s]] {
									own++
								} else {
									coll++
								}
							}
						}
						own, coll = own/float64(len(sa)), coll/float64(len(sa))
						if math.Abs(own-tc.own) > 1e-12 || math.Abs(coll-tc.collateral) > 1e-12 {
							t.Errorf("%s %s: own %g collateral %g; served Maglev: %g, %g", tc.kind, tc.table, tc.own, tc.collateral, own, coll)
						}
						continue
					}
					const n = 200000
					rng := rand.New(rand.NewPCG(1, 2))
					for range n {
						h := rng.Uint64()
						a, b := oa(h), ob(h)
						if a != b {
							if changed[a] || changed[b] {
								own++
							} else {
								coll++
							}
						}
					}
					own, coll = own/n, coll/n
					// Four standard errors of a sampled fraction.
					tol := func(p float64) float64 { return 4*math.Sqrt(max(p, 1e-4)*(1-p)/n) + 1e-9 }
					if math.Abs(own-tc.own) > tol(tc.own) || math.Abs(coll-tc.collateral) > tol(tc.collateral) {
						t.Errorf("%s %s: own %g collateral %g; sampled from the served ring: %g, %g", tc.kind, tc.table, tc.own, tc.collateral, own, coll)
					}
				}
			})
		}
	}
}

// TestPushCostOwnOnly: a stable ring moves no collateral beyond its last
// arc, Maglev some; a join moves about the new replica's share.
func TestPushCostOwnOnly(t *testing.T) {
	a := mustPrepare(t, costFleet(64, fleet.Hash{}))
	f := costFleet(64, fleet.Hash{})
	f.Pools[0].Endpoints[10].Weight++
	b := mustPrepare(t, f)
	pa, pb := a.Fleet().Pools[0], b.Fleet().Pools[0]
	c, _ := poolCost(buildTables(a, &pa), buildTables(b, &pb), time.Time{})
	for _, tc := range c.tables {
		switch tc.kind {
		case "envoy":
			// Maglev refills its table: some collateral
			// (docs/concepts/consistency.md: 0.38% on average for a
			// weight step at 64 replicas).
			if tc.collateral < 0.0005 || tc.collateral > 0.02 || tc.own < 0.001 {
				t.Errorf("envoy: own %g collateral %g", tc.own, tc.collateral)
			}
		default:
			if tc.collateral > 0.005 || tc.own < 0.001 {
				t.Errorf("%s: own %g collateral %g", tc.kind, tc.own, tc.collateral)
			}
		}
	}
}

// TestPushCostCounted: the reconciler counts what each push moved, and
// the status shows the last push and the hour's total, kinds with equal
// figures merged.
func TestPushCostCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	now := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	r := New(Options{Registerer: reg, Now: func() time.Time { return now }})
	f := costFleet(16, fleet.Hash{})
	push := func() {
		r.pushMu.Lock()
		defer r.pushMu.Unlock()
		m := mustPrepare(t, f)
		costs := r.recordCosts(m, now)
		r.mu.Lock()
		r.fleet = m.Fleet()
		r.costs, r.lastCost = keepCosts(r.costs, r.lastCost, m.Fleet(), costs, now)
		r.mu.Unlock()
	}
	push()
	if st := r.Status(); st.Pools[0].Moved != nil {
		t.Fatalf("first push has a cost: %+v", st.Pools[0].Moved)
	}
	f.Pools[0].Endpoints = slices.Clone(f.Pools[0].Endpoints)
	f.Pools[0].Endpoints[3].Weight++
	now = now.Add(time.Minute)
	push()
	push() // nothing changed: no cost
	st := r.Status()
	mv := st.Pools[0].Moved
	if mv == nil || mv.Last == nil || mv.Last.Cause != costWeight || mv.Last.Replicas != 1 || mv.Pushes1h != 1 {
		t.Fatalf("moved: %+v", mv)
	}
	// grpc-js places replicas by address, the others by hash_key (here
	// not the address): three tables, three figures.
	if len(mv.Last.Shares) != 3 || !slices.Equal(mv.Last.Shares[0].Clients, []string{"envoy"}) ||
		!slices.Equal(mv.Last.Shares[1].Clients, []string{"grpc"}) || !slices.Equal(mv.Last.Shares[2].Clients, []string{"grpc-js"}) {
		t.Fatalf("shares: %+v", mv.Last.Shares)
	}
	envoyOwn := testutil.ToFloat64(r.moved.WithLabelValues("chat", "chat", "envoy", "weight", "own"))
	if envoyOwn != mv.Last.Shares[0].Own || envoyOwn <= 0 {
		t.Errorf("counter %g, status %g", envoyOwn, mv.Last.Shares[0].Own)
	}
	// An hour on, the total forgets it; the last push stays.
	now = now.Add(time.Hour)
	f.Pools[0].Endpoints = f.Pools[0].Endpoints[1:]
	push()
	mv = r.Status().Pools[0].Moved
	if mv.Last.Cause != costMembership || mv.Pushes1h != 1 || mv.Total1h[0].ByCause[costMembership] == 0 || mv.Total1h[0].ByCause[costWeight] != 0 {
		t.Fatalf("an hour on: %+v", mv)
	}
}

// TestPushCostInBackground: pushes hand their models to the counting
// goroutine. A replica re-created at a new address under its identity
// moves its own sessions in grpc-js's table alone (grpc-js places
// replicas by address, Envoy and gRPC by hash_key).
func TestPushCostInBackground(t *testing.T) {
	now := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	r := New(Options{Now: func() time.Time { return now }})
	defer r.Close()
	f := costFleet(8, fleet.Hash{})
	push := func() {
		m := mustPrepare(t, f)
		r.mu.Lock()
		r.fleet = m.Fleet()
		r.mu.Unlock()
		r.countCost(m, now)
		// Until the counter takes it: a model pushed before would be
		// counted with this one, as one move.
		for {
			r.costMu.Lock()
			waiting := r.costNext != nil
			r.costMu.Unlock()
			if !waiting {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	moved := func(pushes int) *status.Moved {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if mv := r.Status().Pools[0].Moved; mv != nil && mv.Pushes1h == pushes {
				return mv
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("no %d pushes counted: %+v", pushes, r.Status().Pools[0].Moved)
		return nil
	}
	push()
	f.Pools[0].Endpoints = slices.Clone(f.Pools[0].Endpoints)
	f.Pools[0].Endpoints[2].Host = "10.9.9.9" // a replaced pod: same identity
	push()
	mv := moved(1)
	if mv.Last.Cause != costMembership || mv.Last.Replicas != 1 || len(mv.Last.Shares) != 2 ||
		!slices.Equal(mv.Last.Shares[0].Clients, []string{"envoy", "grpc"}) || mv.Last.Shares[0].Own != 0 || mv.Last.Shares[0].Collateral != 0 ||
		!slices.Equal(mv.Last.Shares[1].Clients, []string{"grpc-js"}) || mv.Last.Shares[1].Own <= 0 || mv.Last.Shares[1].Collateral != 0 {
		t.Fatalf("an address change: %+v", mv.Last)
	}
	f.Pools[0].Endpoints = f.Pools[0].Endpoints[1:]
	push()
	mv = moved(2)
	if mv.Last.Cause != costMembership || mv.Last.Replicas != 1 {
		t.Fatalf("moved: %+v", mv)
	}
	a, b := costFleet(8, fleet.Hash{}).Pools[0], costFleet(8, fleet.Hash{}).Pools[0]
	if !sameTables(&a, &b) {
		t.Error("equal pools give different tables")
	}
	b.Endpoints[2].Host = "10.9.9.9"
	if sameTables(&a, &b) {
		t.Error("an address change leaves grpc-js's table")
	}
	b = costFleet(8, fleet.Hash{}).Pools[0]
	b.Endpoints[2].Weight++
	if sameTables(&a, &b) {
		t.Error("a weight change leaves the tables")
	}
}
