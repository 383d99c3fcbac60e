package translate

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvxds/kvxds/fleet"
)

// groupTestPool is a normalised hash pool of n replicas "r-0".."r-(n-1)".
func groupTestPool(t *testing.T, n int, g fleet.Group) *fleet.Pool {
	t.Helper()
	p := fleet.Pool{Name: "chat", Settings: fleet.Settings{Port: 10000, Hash: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}}, Groups: []fleet.Group{g}}}
	for i := range n {
		p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), Port: 8000, HashKey: fmt.Sprintf("r-%d", i)})
	}
	m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{p}})
	if err != nil {
		t.Fatal(err)
	}
	return &m.Fleet().Pools[0]
}

// grpc-js gets one hash cluster per pool, over the whole pool, whatever
// the groups: the groups' routes go to it (see groupTables). The other
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
	var members []string
	for _, e := range fleet.GroupMembers(p, g) {
		members = append(members, e.HashKey)
	}
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
