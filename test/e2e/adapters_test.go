package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/reconcile"
	"github.com/kvxds/kvxds/xds/translate"
)

// adapterNames are the always-placed adapters of the tests.
var adapterNames = []string{"chat-fr", "code-py", "legal-en", "med-de", "sql-lora"}

// adaptersBlock places adapterNames, each on one replica until demand
// says more, with twenty slots per replica, five of them for placed
// adapters: no replica can fill up, so a member leaving moves only its
// own adapters. (With fewer, an adapter that moves may take the last
// slot of another's first choice and move that one too: the replicas'
// identities are the backends' random ports, so that happened in some
// runs only. Capacity is tested in fleet.)
func adaptersBlock() string {
	return fmt.Sprintf(`  adapters {
    base_models = ["llama-3.1-8b"]
    adapters    = ["%s"]
    max_lora    = 20
  }
`, strings.Join(adapterNames, `", "`))
}

// adapterMembers returns each adapter's members as kvxds places them for
// the policy at path (with every replica healthy and no demand yet).
func adapterMembers(t *testing.T, path string, all []member) map[string][]member {
	t.Helper()
	p, diags := policy.Load(path)
	if diags.HasErrors() {
		t.Fatal(policy.Format(diags))
	}
	m, err := fleet.Prepare(reconcile.WithAdapters(reconcile.Join(p, reconcile.StaticTargets(p), nil), nil))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]member{}
	for _, a := range m.Plan("chat").Adapters {
		for _, e := range a.Members {
			i := slices.IndexFunc(all, func(mb member) bool { return mb.b.addr == e.HashKey })
			if i < 0 {
				t.Fatalf("adapter member %s is not a backend", e.HashKey)
			}
			out[a.Name] = append(out[a.Name], all[i])
		}
	}
	if len(out) != len(adapterNames) {
		t.Fatalf("placed %v, want %v", out, adapterNames)
	}
	return out
}

// withAdapter adds the adapter header to session calls.
func withAdapter(calls [][]string, adapter string) [][]string {
	out := make([][]string, len(calls))
	for i, c := range calls {
		out[i] = append(slices.Clone(c), "x-kvxds-adapter", adapter)
	}
	return out
}

// Requests naming a placed adapter land only on its members (grpc-go:
// its own cluster; grpc-js, which gets one cluster per pool, hashes them
// over the whole pool like the base model's); requests of the base model,
// of an adapter not placed, or without the header keep the pool's table.
// A member leaving moves only the adapters it held.
func TestAdapters(t *testing.T) {
	for _, dp := range dataPlanes {
		t.Run(dp.name, func(t *testing.T) {
			js := dp.name == "grpc-js"
			bs := startBackends(t, 6)
			var all []member
			for _, b := range bs {
				all = append(all, member{b, 1})
			}
			path, xdsAddr, adminAddr := policyFile(t)
			writeAtomic(t, path, policyTextWith(xdsAddr, adminAddr, all, adaptersBlock()))
			k := startInProcess(t, path, xdsAddr, adminAddr)
			defer k.stop()
			placed := adapterMembers(t, path, all)
			slots := map[string]int{}
			for _, ms := range placed {
				for _, m := range ms {
					slots[m.b.id]++
				}
			}
			for id, n := range slots {
				if n > 5 {
					t.Fatalf("replica %s holds %d adapters, above its 5 slots for placed adapters", id, n)
				}
			}

			ss := sessions(200)
			calls := sessionCalls(ss)
			wantPool := predict(all, ss)
			cl := dp.new(t, xdsAddr)
			settle(t, cl, ss, wantPool, "pool")
			check := func(placed map[string][]member, pool []member) {
				t.Helper()
				for _, name := range adapterNames {
					want := predict(placed[name], ss)
					if js {
						want = predict(pool, ss)
					}
					settleRouted(t, cl, withAdapter(calls[:60], name), want, "adapter "+name)
				}
				wantPool := predict(pool, ss)
				checkRouted(t, cl, "base model", routeEach(t, cl, withAdapter(calls[:60], "llama-3.1-8b")), wantPool)
				checkRouted(t, cl, "adapter not placed", routeEach(t, cl, withAdapter(calls[:60], "unknown-lora")), wantPool)
				checkRouted(t, cl, "no adapter", routeEach(t, cl, calls[:60]), wantPool)
			}
			check(placed, all)

			// A member of one adapter leaves: that adapter moves, no other.
			gone := placed["sql-lora"][0]
			rest := slices.DeleteFunc(slices.Clone(all), func(m member) bool { return m == gone })
			writeAtomic(t, path, policyTextWith(xdsAddr, adminAddr, rest, adaptersBlock()))
			after := adapterMembers(t, path, rest)
			for _, name := range adapterNames {
				had := slices.Contains(placed[name], gone)
				if same := slices.Equal(placed[name], after[name]); had == same {
					t.Errorf("adapter %s (had the leaver: %t): members %v → %v", name, had, ids(placed[name]), ids(after[name]))
				}
			}
			check(after, rest)
			if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
				t.Errorf("clients rejected %v responses", n)
			}
			if n := metricWhere(t, adminAddr, "kvxds_adapter_moves_total", `cause="membership"`); n < 1 {
				t.Errorf("membership moves = %v, want the leaver's adapter", n)
			}
		})
	}
}

func ids(ms []member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.b.id
	}
	return out
}

// startAdapterServer serves pool "chat" over bs with a placement the
// test sets (the placement is decided elsewhere).
func startAdapterServer(t *testing.T, bs []*backend) *modelServer {
	t.Helper()
	p := fleet.Pool{Name: "chat", Settings: fleet.Settings{Port: 10000,
		Hash: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}},
		LoRA: &fleet.Adapters{MaxLoRA: 4, BaseModels: []string{"llama-3.1-8b"}}}}
	// The address as identity: grpc-js places replicas by address.
	return startModelServer(t, p, bs, func(b *backend) string { return b.addr })
}

// servePlacement pushes the pool with placement as its adapters and
// returns each adapter's members.
func servePlacement(t *testing.T, s *modelServer, all []member, placement ...fleet.Adapter) map[string][]member {
	t.Helper()
	m := s.push(t, func(p *fleet.Pool) { p.Adapters = placement })
	out := map[string][]member{}
	for _, ap := range m.Plan("chat").Adapters {
		for _, e := range ap.Members {
			out[ap.Name] = append(out[ap.Name], all[slices.IndexFunc(all, func(mb member) bool { return mb.b.addr == e.HashKey })])
		}
	}
	return out
}

// Adapters placed on several replicas: grpc-go hashes each adapter's
// sessions over its members exactly as the ring over them says, and the
// base model's over the pool; grpc-js hashes both over the pool. A new
// adapter reaches grpc-go as one cluster, one route configuration (its
// staged route) and one assignment, then its route, and grpc-js as its
// route alone; an adapter's
// replicas decided anew reach grpc-go as its assignment and cluster.
func TestAdapterTables(t *testing.T) {
	for _, dp := range dataPlanes {
		t.Run(dp.name, func(t *testing.T) {
			js := dp.name == "grpc-js"
			kind := translate.GRPC
			if js {
				kind = translate.GRPCJS
			}
			bs := startBackends(t, 6)
			var all []member
			for _, b := range bs {
				all = append(all, member{b, 1})
			}
			a := startAdapterServer(t, bs)
			placed := servePlacement(t, a, all, fleet.Adapter{Name: "sql-lora", Replicas: 3, Share: 0.4}, fleet.Adapter{Name: "chat-fr", Replicas: 2, Share: 0.2})
			cl := dp.new(t, a.addr)
			ss := sessions(200)
			calls := sessionCalls(ss)
			want := func(name string, members []member) expectation {
				if js {
					return predict(all, ss)
				}
				return predictRing(members, ss, 0, fleet.GroupEntriesPerWeight(len(members), 0, 0), func(m member) string { return m.b.addr })
			}
			settle(t, cl, ss, predict(all, ss), "pool")
			for name, ms := range placed {
				if !js && len(ms) < 2 {
					t.Fatalf("%s has %d members", name, len(ms))
				}
				got := settleRouted(t, cl, withAdapter(calls, name), want(name, ms), "adapter "+name)
				if !js {
					for s, id := range got {
						if !slices.ContainsFunc(ms, func(m member) bool { return m.b.id == id }) {
							t.Errorf("%s: session %s of %s on %s, outside its members %v", dp.name, s, name, id, ids(ms))
						}
					}
				}
			}
			checkRouted(t, cl, "base model", routeEach(t, cl, withAdapter(calls[:80], "llama-3.1-8b")), predict(all, ss))

			// A new adapter, placed as the leader places it: its cluster
			// (named by a staged route) first, then its route.
			before := a.srv.Versions(kind)
			servePlacement(t, a, all, fleet.Adapter{Name: "sql-lora", Replicas: 3, Share: 0.4}, fleet.Adapter{Name: "chat-fr", Replicas: 2, Share: 0.2},
				fleet.Adapter{Name: "new-lora", Replicas: 2, Share: 0.1, Stage: fleet.StageAdding})
			after := a.srv.Versions(kind)
			for typ, v := range before {
				changed := after[typ] != v
				wantChanged := !js && (typ == resourcev3.RouteType || typ == resourcev3.ClusterType || typ == resourcev3.EndpointType)
				if changed != wantChanged {
					t.Errorf("a new adapter: %s changed %t, want %t", typ, changed, wantChanged)
				}
			}
			// Not routed yet: its calls take the pool's table.
			checkRouted(t, cl, "adapter new-lora, adding", routeEach(t, cl, withAdapter(calls[:40], "new-lora")), predict(all, ss))
			before = a.srv.Versions(kind)
			placed = servePlacement(t, a, all, fleet.Adapter{Name: "sql-lora", Replicas: 3, Share: 0.4}, fleet.Adapter{Name: "chat-fr", Replicas: 2, Share: 0.2},
				fleet.Adapter{Name: "new-lora", Replicas: 2, Share: 0.1})
			after = a.srv.Versions(kind)
			for typ, v := range before {
				if changed, wantChanged := after[typ] != v, typ == resourcev3.RouteType; changed != wantChanged {
					t.Errorf("a new adapter routed: %s changed %t, want %t", typ, changed, wantChanged)
				}
			}
			settleRouted(t, cl, withAdapter(calls, "new-lora"), want("new-lora", placed["new-lora"]), "adapter new-lora")

			// sql-lora's replicas decided anew: no route changes.
			before = a.srv.Versions(kind)
			placed = servePlacement(t, a, all, fleet.Adapter{Name: "sql-lora", Replicas: 4, Share: 0.5}, fleet.Adapter{Name: "chat-fr", Replicas: 2, Share: 0.2},
				fleet.Adapter{Name: "new-lora", Replicas: 2, Share: 0.1})
			after = a.srv.Versions(kind)
			if after[resourcev3.RouteType] != before[resourcev3.RouteType] || after[resourcev3.ListenerType] != before[resourcev3.ListenerType] {
				t.Errorf("replicas decided anew changed routes or listeners")
			}
			settleRouted(t, cl, withAdapter(calls, "sql-lora"), want("sql-lora", placed["sql-lora"]), "adapter sql-lora at 4")
		})
	}
}
