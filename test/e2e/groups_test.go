package e2e

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/reconcile"
	"github.com/kvxds/kvxds/xds/translate"
)

// groupBlock is the tenant group of the tests: x-tenant-id = acme on 2 of
// the pool's replicas.
func groupBlock(exclusive bool) string {
	return fmt.Sprintf(`  group "acme" {
    match {
      header = "x-tenant-id"
      values = ["acme"]
    }
    replicas  = 2
    exclusive = %t
  }
`, exclusive)
}

// groupMembers returns the members of the policy's group "acme" and the
// replicas of the pool's own clusters, as kvxds chooses them; grpc-js
// gets every group as exclusive (xds/translate, planGroups).
func groupMembers(t *testing.T, path string, all []member, jsClient bool) (group, rest []member) {
	t.Helper()
	p, diags := policy.Load(path)
	if diags.HasErrors() {
		t.Fatal(policy.Format(diags))
	}
	m, err := translate.Prepare(reconcile.Join(p, reconcile.StaticGroups(p), nil))
	if err != nil {
		t.Fatal(err)
	}
	pool := &m.Fleet().Pools[0]
	g := pool.Groups[0]
	var ids []string
	for _, e := range translate.GroupMembers(pool, g) {
		ids = append(ids, e.HashKey)
	}
	for _, mb := range all {
		in := slices.Contains(ids, mb.b.addr)
		if in {
			group = append(group, mb)
		}
		if !in || !g.Exclusive && !jsClient {
			rest = append(rest, mb)
		}
	}
	if len(group) != g.Replicas {
		t.Fatalf("group has %d members, want %d: %v", len(group), g.Replicas, ids)
	}
	return group, rest
}

// withTenant adds x-tenant-id to session calls.
func withTenant(calls [][]string, tenant string) [][]string {
	out := make([][]string, len(calls))
	for i, c := range calls {
		out[i] = append(slices.Clone(c), "x-tenant-id", tenant)
	}
	return out
}

// routeEach sends calls one at a time (so a call that stalls in a client's
// balancer is not rescued by another's picker update) and returns where
// each landed, keyed by its x-session-id; every failure fails the test.
func routeEach(t *testing.T, cl client, calls [][]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range calls {
		ids, errs := cl.callMany([][]string{c})
		if errs[0] != nil {
			t.Fatalf("%s: call %v: %v", cl.name(), c, errs[0])
		}
		out[c[1]] = ids[0]
	}
	return out
}

func checkRouted(t *testing.T, cl client, what string, got map[string]string, want expectation) {
	t.Helper()
	var wrong []string
	for s, id := range got {
		if !want.allows(s, id) {
			wrong = append(wrong, fmt.Sprintf("%s on %s, want %v", s, id, want[s]))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%s: %s: %d of %d requests off the ring model: %v", cl.name(), what, len(wrong), len(got), wrong[:min(3, len(wrong))])
	}
}

// Requests of a tenant group land only on the group's replicas and follow
// the ring model over them; other requests follow the pool's (without the
// group's replicas when it is exclusive, and always for grpc-js). Each
// client is driven through both orders, one call at a time: grpc-js
// shares subchannels between a channel's clusters, and a ring hash leaf
// connecting to a subchannel another cluster already made READY stalls
// until its deadline, which fails the test.
func TestTenantGroups(t *testing.T) {
	for _, exclusive := range []bool{false, true} {
		for _, dp := range dataPlanes {
			t.Run(fmt.Sprintf("exclusive=%t/%s", exclusive, dp.name), func(t *testing.T) {
				bs := startBackends(t, 6)
				var members []member
				for _, b := range bs {
					members = append(members, member{b, 1})
				}
				path, xdsAddr, adminAddr := policyFile(t)
				writeAtomic(t, path, policyTextWith(xdsAddr, adminAddr, members, groupBlock(exclusive)))
				k := startInProcess(t, path, xdsAddr, adminAddr)
				defer k.stop()
				group, rest := groupMembers(t, path, members, dp.name == "grpc-js")

				ss := sessions(300)
				calls := sessionCalls(ss)
				wantPool, wantGroup := predict(rest, ss), predict(group, ss)

				for _, groupFirst := range []bool{false, true} {
					cl := dp.new(t, xdsAddr)
					if groupFirst {
						checkRouted(t, cl, "group", routeEach(t, cl, withTenant(calls, "acme")), wantGroup)
						checkRouted(t, cl, "pool", routeEach(t, cl, calls), wantPool)
					} else {
						settle(t, cl, ss, wantPool, "pool")
						checkRouted(t, cl, "group", routeEach(t, cl, withTenant(calls, "acme")), wantGroup)
					}
					// Another tenant's requests are the pool's.
					checkRouted(t, cl, "other tenant", routeEach(t, cl, withTenant(calls[:100], "globex")), wantPool)
					// The group's requests without a session key stay in the group.
					ids := map[string]int{}
					for range 60 {
						ids[callWith(t, cl, "x-tenant-id", "acme")]++
					}
					for id := range ids {
						if !slices.ContainsFunc(group, func(m member) bool { return m.b.id == id }) {
							t.Errorf("%s: a keyless request of the group reached %s, outside the group", cl.name(), id)
						}
					}
				}
				if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
					t.Errorf("clients rejected %v responses", n)
				}
			})
		}
	}
}
