package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/reconcile"
)

// adapterNames are the always-placed adapters of the tests.
var adapterNames = []string{"chat-fr", "code-py", "legal-en", "med-de", "sql-lora"}

// adaptersBlock places adapterNames, each on one replica until demand
// says more, with two slots per replica (free slots: a member leaving
// moves only its own adapters).
func adaptersBlock() string {
	return fmt.Sprintf(`  adapters {
    base_models = ["llama-3.1-8b"]
    adapters    = ["%s"]
    max_lora    = 2
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
				if n > 2 {
					t.Fatalf("replica %s holds %d adapters, above its 2 slots", id, n)
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
