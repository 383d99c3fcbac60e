package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/reconcile"
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

// groupMembers returns the replicas the policy's group "acme" routes to
// and the replicas of the pool's own clusters, as kvxds chooses them;
// grpc-js gets no group clusters, so both are the whole pool for it
// (xds/translate, groupTables).
func groupMembers(t *testing.T, path string, all []member, jsClient bool) (group, rest []member) {
	t.Helper()
	if jsClient {
		return all, all
	}
	_, g := policyGroup(t, path)
	group = groupOf(t, path, all, g.Replicas)
	for _, mb := range all {
		if !slices.Contains(group, mb) || !g.Exclusive {
			rest = append(rest, mb)
		}
	}
	return group, rest
}

// predictGroup is predict for the ring of the policy's group "acme" over
// members.
func predictGroup(t *testing.T, path string, members []member, ss []string) expectation {
	t.Helper()
	p, g := policyGroup(t, path)
	per := fleet.GroupEntriesPerWeight(g.Replicas, g.MemberWeight, p.Hash.GRPCRingCap)
	return predictRing(members, ss, p.Hash.GRPCRingCap, per, func(m member) string { return m.b.addr })
}

// policyGroup returns the policy's first pool, as kvxds serves it with
// every replica healthy, and its group "acme".
func policyGroup(t *testing.T, path string) (*fleet.Pool, fleet.Group) {
	t.Helper()
	p, diags := policy.Load(path)
	if diags.HasErrors() {
		t.Fatal(policy.Format(diags))
	}
	m, err := fleet.Prepare(reconcile.Join(p, reconcile.StaticTargets(p), nil))
	if err != nil {
		t.Fatal(err)
	}
	pool := &m.Fleet().Pools[0]
	return pool, pool.Groups[0]
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
// group's replicas when it is exclusive). grpc-js, which gets one cluster
// per pool, routes the group's requests over the whole pool, hashed on
// the group's keys. Each client is driven through both orders, one call
// at a time, so that a call stalled in a client's balancer is not rescued
// by another call's picker update.
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
				if dp.name != "grpc-js" {
					wantGroup = predictGroup(t, path, group, ss)
				}

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
					// They are not hashed on the group's own header: that
					// would send them all to one replica.
					if len(ids) < 2 {
						t.Errorf("%s: 60 keyless requests of the group all reached %v", cl.name(), ids)
					}
				}
				if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
					t.Errorf("clients rejected %v responses", n)
				}
			})
		}
	}
}

// groupOf returns the members of the policy's group "acme" were it n
// replicas large (with every replica healthy), as kvxds chooses them.
func groupOf(t *testing.T, path string, all []member, n int) []member {
	t.Helper()
	pool, g := policyGroup(t, path)
	g.Replicas = n
	var out []member
	for _, e := range fleet.GroupMembers(pool, g) {
		i := slices.IndexFunc(all, func(mb member) bool { return mb.b.addr == e.HashKey })
		if i < 0 {
			t.Fatalf("group member %s is not a backend", e.HashKey)
		}
		out = append(out, all[i])
	}
	if len(out) != n {
		t.Fatalf("group has %d members, want %d", len(out), n)
	}
	return out
}

// settleRouted waits until cl routes every call where want allows.
func settleRouted(t *testing.T, cl client, calls [][]string, want expectation, what string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := routeEach(t, cl, calls)
		var wrong []string
		for s, id := range got {
			if !want.allows(s, id) {
				wrong = append(wrong, fmt.Sprintf("%s on %s, want %v", s, id, want[s]))
			}
		}
		if len(wrong) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			slices.Sort(wrong)
			t.Fatalf("%s: %s: %d of %d requests never reached the replica the ring puts them on: %v", cl.name(), what, len(wrong), len(got), wrong[:min(3, len(wrong))])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A group member that the escape hatch drains keeps its identity in the
// group while the next-ranked replica fills in: the group's sessions land
// exactly where the ring over its healthy members puts them, the filler
// leaves the pool's own cluster (the group is exclusive), and when the
// member recovers every session returns to where it was. grpc-js, which
// gets the groups' requests over the whole pool, sees one replica drain.
func TestTenantGroupMemberDrains(t *testing.T) {
	for _, dp := range dataPlanes {
		t.Run(dp.name, func(t *testing.T) {
			js := dp.name == "grpc-js"
			bs := startBackends(t, 6)
			var members []member
			for _, b := range bs {
				members = append(members, member{b, 1})
			}
			path, xdsAddr, adminAddr := policyFile(t)
			writeAtomic(t, path, dynamicPolicy(xdsAddr, adminAddr, members, fixedWeights+groupBlock(true)))
			k := startInProcess(t, path, xdsAddr, adminAddr)
			defer k.stop()
			group, rest := groupMembers(t, path, members, js)
			// The filler is the replica that ranks next after the members.
			var filler member
			for _, mb := range groupOf(t, path, members, 3) {
				if !slices.Contains(groupOf(t, path, members, 2), mb) {
					filler = mb
				}
			}
			eventually(t, "the first scrapes", func() bool {
				return metric(t, adminAddr, "kvxds_scrapes_total") >= 12
			})

			cl := dp.new(t, xdsAddr)
			ss := sessions(300)
			groupCalls := withTenant(sessionCalls(ss), "acme")
			// grpc-js routes the group over the pool's cluster and ring.
			groupRing := func(ms []member) expectation {
				if js {
					return predict(ms, ss)
				}
				return predictGroup(t, path, ms, ss)
			}
			beforeGroup := settleRouted(t, cl, groupCalls, groupRing(group), "group, all healthy")
			beforePool := settle(t, cl, ss, predict(rest, ss), "pool, all healthy")

			drained := groupOf(t, path, members, 2)[0]
			if shares(beforeGroup)[drained.b.id] == 0 {
				t.Fatal("the drained member serves none of the group's sessions")
			}
			drained.b.setLoad(20, 0.5)
			without := func(ms []member, drop member) []member {
				return slices.DeleteFunc(slices.Clone(ms), func(m member) bool { return m == drop })
			}
			inGroup, outside := append(without(group, drained), filler), without(rest, filler)
			if js {
				inGroup, outside = without(members, drained), without(members, drained)
			}
			during := settleRouted(t, cl, groupCalls, groupRing(inGroup), "group with a member drained")
			settle(t, cl, ss, predict(outside, ss), "pool with a member drained")
			if !js && shares(during)[filler.b.id] == 0 {
				t.Errorf("the filler %s took none of the group's sessions", filler.b.id)
			}
			t.Logf("%s drained: %s took %d of the group's %d sessions",
				drained.b.id, filler.b.id, shares(during)[filler.b.id], len(ss))

			drained.b.setLoad(0, 0.1)
			settleRouted(t, cl, groupCalls, exactly(beforeGroup), "group with the member back")
			settle(t, cl, ss, exactly(beforePool), "pool with the member back")
			if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
				t.Errorf("clients rejected %v responses", n)
			}
		})
	}
}
