package translate

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvxds/kvxds/xds/fleet"
)

// groupTestPool is a normalised hash pool of n replicas "r-0".."r-(n-1)".
func groupTestPool(t *testing.T, n int, g fleet.Group) *fleet.Pool {
	t.Helper()
	p := fleet.Pool{Name: "chat", Port: 10000, Hash: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}}, Groups: []fleet.Group{g}}
	for i := range n {
		p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), Port: 8000, HashKey: fmt.Sprintf("r-%d", i)})
	}
	m, err := Prepare(fleet.Fleet{Pools: []fleet.Pool{p}})
	if err != nil {
		t.Fatal(err)
	}
	return &m.Fleet().Pools[0]
}

func memberIDs(eps []fleet.Endpoint) []string {
	var ids []string
	for _, e := range eps {
		ids = append(ids, e.HashKey)
	}
	return ids
}

// diff returns what is in a but not in b.
func diff(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// A membership change of the pool moves at most one replica in and one out
// of a group, and only when the replica that changes ranks among its
// members; health and weight changes of non-members move nothing.
func TestGroupMembersStable(t *testing.T) {
	g := fleet.Group{Name: "acme", Header: "x-tenant-id", Values: []string{"acme"}, Replicas: 3}
	for _, n := range []int{4, 8, 16, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p := groupTestPool(t, n, g)
			base := memberIDs(GroupMembers(p, g))
			if len(base) != 3 {
				t.Fatalf("%d members, want 3: %v", len(base), base)
			}
			for i := range p.Endpoints {
				id := p.Endpoints[i].HashKey
				member := slices.Contains(base, id)
				for _, tc := range []struct {
					name   string
					change func(q *fleet.Pool)
					// moves is whether the group may change, and by how much
					out, in int
				}{
					{"remove", func(q *fleet.Pool) { q.Endpoints = slices.Delete(q.Endpoints, i, i+1) }, b2i(member), b2i(member)},
					{"drain", func(q *fleet.Pool) { q.Endpoints[i].Health = fleet.Draining }, 0, b2i(member)},
					{"weight", func(q *fleet.Pool) { q.Endpoints[i].Weight = 4 }, 0, 0},
				} {
					q := *p
					q.Endpoints = slices.Clone(p.Endpoints)
					tc.change(&q)
					got := GroupMembers(&q, g)
					ids := memberIDs(got)
					healthy := 0
					for _, e := range got {
						if e.Health == fleet.Healthy {
							healthy++
						}
					}
					if healthy != 3 {
						t.Errorf("%s %s: %d healthy members, want 3: %v", tc.name, id, healthy, ids)
					}
					if left, joined := diff(base, ids), diff(ids, base); len(left) != tc.out || len(joined) != tc.in {
						t.Errorf("%s %s (member %v): left %v, joined %v; want %d out, %d in", tc.name, id, member, left, joined, tc.out, tc.in)
					}
				}
			}
			// A replica joining enters the group only by displacing one.
			q := *p
			q.Endpoints = append(slices.Clone(p.Endpoints), fleet.Endpoint{Host: "10.9.9.9", Port: 8000, HashKey: "r-new", Weight: 1})
			ids := memberIDs(GroupMembers(&q, g))
			left, joined := diff(base, ids), diff(ids, base)
			if len(left) != len(joined) || len(joined) > 1 || (len(joined) == 1 && joined[0] != "r-new") {
				t.Errorf("join: left %v, joined %v", left, joined)
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Groups of different names pick different subsets, roughly uniformly.
func TestGroupMembersSpread(t *testing.T) {
	const n, groups = 8, 800
	counts := map[string]int{}
	p := groupTestPool(t, n, fleet.Group{Name: "g", Header: "h", Values: []string{"v"}, Replicas: 2})
	for i := range groups {
		for _, e := range GroupMembers(p, fleet.Group{Name: fmt.Sprintf("tenant-%d", i), Replicas: 2}) {
			counts[e.HashKey]++
		}
	}
	want := groups * 2 / n
	for id, c := range counts {
		if c < want*7/10 || c > want*13/10 {
			t.Errorf("replica %s in %d of %d groups, want about %d", id, c, groups, want)
		}
	}
	if len(counts) != n {
		t.Errorf("%d of %d replicas in any group", len(counts), n)
	}
}

func TestDefaultView(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n         int
		replicas  int
		exclusive bool
		drainRest bool
		drainOne  bool // a member drains: the next-ranked replica fills in
		want      int  // endpoints left in the pool's own assignment
	}{
		{"shared", 6, 2, false, false, false, 6},
		{"exclusive", 6, 2, true, false, false, 4},
		{"exclusive, a member draining", 6, 2, true, false, true, 3},
		{"exclusive takes all", 2, 5, true, false, false, 2},
		{"no healthy left", 4, 2, true, true, false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := fleet.Group{Name: "acme", Header: "x-tenant-id", Values: []string{"acme"}, Replicas: tc.replicas, Exclusive: tc.exclusive}
			p := groupTestPool(t, tc.n, g)
			if tc.drainRest {
				members := memberIDs(GroupMembers(p, g))
				for i := range p.Endpoints {
					if !slices.Contains(members, p.Endpoints[i].HashKey) {
						p.Endpoints[i].Health = fleet.Draining
					}
				}
			}
			if tc.drainOne {
				first := memberIDs(GroupMembers(p, g))[0]
				for i := range p.Endpoints {
					if p.Endpoints[i].HashKey == first {
						p.Endpoints[i].Health = fleet.Draining
					}
				}
			}
			got := defaultView(p, Envoy)
			// Weight domains: exactly the replicas the pool's table lost,
			// in the group's.
			domains := WeightDomains(p)
			for _, e := range p.Endpoints {
				inPool := slices.ContainsFunc(got.Endpoints, func(o fleet.Endpoint) bool { return o.HashKey == e.HashKey })
				if d, ok := domains[e.Identity()]; ok == inPool || (ok && d != g.Name) {
					t.Errorf("%s: domain %q (listed %t), in the pool's table %t", e.HashKey, d, ok, inPool)
				}
			}
			if len(got.Endpoints) != tc.want {
				t.Fatalf("pool keeps %d endpoints, want %d", len(got.Endpoints), tc.want)
			}
			if tc.exclusive && tc.want < tc.n {
				for _, e := range GroupMembers(p, g) {
					if slices.ContainsFunc(got.Endpoints, func(o fleet.Endpoint) bool { return o.HashKey == e.HashKey }) {
						t.Errorf("exclusive member %s still in the pool's assignment", e.HashKey)
					}
				}
			}
		})
	}
}

// grpc-js gets one hash cluster per pool, over the whole pool, whatever
// the groups: the groups' routes go to it (see planGroups). The other
// kinds serve every group with a cluster of its own.
func TestGroupsForGRPCJS(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		groups []fleet.Group
	}{
		{"one shared", 6, []fleet.Group{{Name: "acme", Replicas: 2}}},
		{"one exclusive", 6, []fleet.Group{{Name: "acme", Replicas: 2, Exclusive: true}}},
		{"whole pool", 3, []fleet.Group{{Name: "acme", Replicas: 3}}},
		{"many", 8, []fleet.Group{{Name: "a", Replicas: 3}, {Name: "b", Replicas: 3, Exclusive: true}, {Name: "c", Replicas: 3}, {Name: "d", Replicas: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.groups {
				tc.groups[i].Header = "x-tenant-id"
				tc.groups[i].Values = []string{tc.groups[i].Name}
			}
			p := groupTestPool(t, tc.n, tc.groups[0])
			p.Groups = tc.groups
			for _, kind := range Kinds {
				r, err := translateFleet(fleet.Fleet{Pools: []fleet.Pool{*p}}, kind)
				if err != nil {
					t.Fatal(err)
				}
				want := 1 + len(tc.groups)
				if kind == GRPCJS {
					want = 1
				}
				if len(r.Endpoints) != want {
					t.Errorf("%v: %d assignments, want %d", kind, len(r.Endpoints), want)
				}
				if kind != GRPCJS {
					continue
				}
				n := 0
				for _, l := range r.Endpoints[0].GetEndpoints() {
					n += len(l.GetLbEndpoints())
				}
				if n != tc.n {
					t.Errorf("grpc-js: the pool's assignment has %d endpoints, want all %d", n, tc.n)
				}
				for _, c := range r.Clusters {
					if c.GetName() != p.Name {
						t.Errorf("grpc-js: cluster %q besides the pool's", c.GetName())
					}
				}
				routes := 0
				for _, vh := range r.Routes[0].GetVirtualHosts() {
					for _, rt := range vh.GetRoutes() {
						routes++
						if c := rt.GetRoute().GetCluster(); c != p.Name {
							t.Errorf("grpc-js: a route goes to %q, not the pool's cluster", c)
						}
					}
				}
				if routes != 1+len(tc.groups) {
					t.Errorf("grpc-js: %d routes, want one per group and the pool's", routes)
				}
			}
		})
	}
}

// A member draining changes the groups' assignments (and, for gRPC,
// clusters) only: the fast path equals a full translation, and no
// kind's routes change.
func TestGroupsRetranslate(t *testing.T) {
	g := fleet.Group{Name: "acme", Header: "x-tenant-id", Values: []string{"acme"}, Replicas: 2}
	p := groupTestPool(t, 3, g)
	members := memberIDs(GroupMembers(p, g))
	f := fleet.Fleet{Pools: []fleet.Pool{*p}}
	drained := fleet.Fleet{Pools: []fleet.Pool{*p}}
	drained.Pools[0].Endpoints = slices.Clone(p.Endpoints)
	for i, e := range drained.Pools[0].Endpoints {
		if !slices.Contains(members, e.HashKey) {
			drained.Pools[0].Endpoints[i].Health = fleet.Draining
		}
	}
	for _, kind := range Kinds {
		prev, err := translateFleet(f, kind)
		if err != nil {
			t.Fatal(err)
		}
		fast, err := retranslateFleet(prev, drained, kind)
		if err != nil {
			t.Fatal(err)
		}
		full, err := translateFleet(drained, kind)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			kind      string
			got, want []byte
		}{
			{"routes", toYAML(t, fast.Routes), toYAML(t, full.Routes)},
			{"clusters", toYAML(t, fast.Clusters), toYAML(t, full.Clusters)},
			{"endpoints", toYAML(t, fast.Endpoints), toYAML(t, full.Endpoints)},
		} {
			if string(c.got) != string(c.want) {
				t.Errorf("%v: retranslated %s differ from a full translation:\n%s\n---\n%s", kind, c.kind, c.got, c.want)
			}
		}
		if string(toYAML(t, prev.Routes)) != string(toYAML(t, full.Routes)) {
			t.Errorf("%v: routes changed when a member drained", kind)
		}
	}
}
