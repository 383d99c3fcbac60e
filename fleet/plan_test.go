package fleet

import (
	"fmt"
	"slices"
	"testing"
)

// groupTestPool is a normalised hash pool of n replicas "r-0".."r-(n-1)".
func groupTestPool(t *testing.T, n int, g Group) *Pool {
	t.Helper()
	p := Pool{Name: "chat", Settings: Settings{Port: 10000, Hash: Hash{Keys: []HashKey{{Header: "x-session-id"}}}, Groups: []Group{g}}}
	for i := range n {
		p.Endpoints = append(p.Endpoints, Endpoint{Host: fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), Port: 8000, HashKey: fmt.Sprintf("r-%d", i)})
	}
	m, err := Prepare(Fleet{Pools: []Pool{p}})
	if err != nil {
		t.Fatal(err)
	}
	return &m.Fleet().Pools[0]
}

func memberIDs(eps []Endpoint) []string {
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
	g := Group{Name: "acme", Header: "x-tenant-id", Values: []string{"acme"}, Replicas: 3}
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
					change func(q *Pool)
					// moves is whether the group may change, and by how much
					out, in int
				}{
					{"remove", func(q *Pool) { q.Endpoints = slices.Delete(q.Endpoints, i, i+1) }, b2i(member), b2i(member)},
					{"drain", func(q *Pool) { q.Endpoints[i].Health = Draining }, 0, b2i(member)},
					{"weight", func(q *Pool) { q.Endpoints[i].Weight = 4 }, 0, 0},
				} {
					q := *p
					q.Endpoints = slices.Clone(p.Endpoints)
					tc.change(&q)
					got := GroupMembers(&q, g)
					ids := memberIDs(got)
					healthy := 0
					for _, e := range got {
						if e.Health == Healthy {
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
			q.Endpoints = append(slices.Clone(p.Endpoints), Endpoint{Host: "10.9.9.9", Port: 8000, HashKey: "r-new", Weight: 1})
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
	p := groupTestPool(t, n, Group{Name: "g", Header: "h", Values: []string{"v"}, Replicas: 2})
	for i := range groups {
		for _, e := range GroupMembers(p, Group{Name: fmt.Sprintf("tenant-%d", i), Replicas: 2}) {
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

// The pool's own table leaves out the members of its exclusive groups,
// unless no healthy replica would be left; the weight domains are exactly
// the replicas it lost.
func TestPlanOwnTable(t *testing.T) {
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
			g := Group{Name: "acme", Header: "x-tenant-id", Values: []string{"acme"}, Replicas: tc.replicas, Exclusive: tc.exclusive}
			p := groupTestPool(t, tc.n, g)
			if tc.drainRest {
				members := memberIDs(GroupMembers(p, g))
				for i := range p.Endpoints {
					if !slices.Contains(members, p.Endpoints[i].HashKey) {
						p.Endpoints[i].Health = Draining
					}
				}
			}
			if tc.drainOne {
				first := memberIDs(GroupMembers(p, g))[0]
				for i := range p.Endpoints {
					if p.Endpoints[i].HashKey == first {
						p.Endpoints[i].Health = Draining
					}
				}
			}
			plan := planPool(p)
			got := plan.Endpoints
			// Weight domains: exactly the replicas the pool's table lost,
			// in the group's.
			domains := plan.Domains
			for _, e := range p.Endpoints {
				inPool := slices.ContainsFunc(got, func(o Endpoint) bool { return o.HashKey == e.HashKey })
				if d, ok := domains[e.Identity()]; ok == inPool || (ok && d != g.Name) {
					t.Errorf("%s: domain %q (listed %t), in the pool's table %t", e.HashKey, d, ok, inPool)
				}
			}
			if len(got) != tc.want {
				t.Fatalf("pool keeps %d endpoints, want %d", len(got), tc.want)
			}
			if tc.exclusive && tc.want < tc.n {
				for _, e := range GroupMembers(p, g) {
					if slices.ContainsFunc(got, func(o Endpoint) bool { return o.HashKey == e.HashKey }) {
						t.Errorf("exclusive member %s still in the pool's assignment", e.HashKey)
					}
				}
			}
		})
	}
}

// Prepare rejects what some client would NACK, beyond Validate; a zero
// Model was never prepared, and has no plans.
func TestPrepare(t *testing.T) {
	good := func() Pool {
		return Pool{Name: "p", Settings: Settings{Port: 1000, Hash: Hash{Keys: []HashKey{{Header: "x-session-id"}}}},
			Endpoints: []Endpoint{{Host: "10.0.0.1", Port: 80}}}
	}
	m, err := Prepare(Fleet{Pools: []Pool{good()}})
	if err != nil || !m.Prepared() {
		t.Fatalf("Prepare: %v", err)
	}
	if pl := m.Plan("p"); len(pl.Endpoints) != 1 || len(pl.Rings) != 1 || pl.PerWeight != EntriesPerWeight(0) {
		t.Errorf("plan %+v", pl)
	}
	if pl := m.Plan("nope"); pl.Endpoints != nil || pl.Rings != nil {
		t.Errorf("plan of no pool: %+v", pl)
	}
	if (Model{}).Prepared() {
		t.Error("zero Model prepared")
	}
	for name, mutate := range map[string]func(p *Pool){
		"non-prime table":   func(p *Pool) { p.Hash.TableSize = 65536 },
		"ring above max":    func(p *Pool) { p.Hash.Algorithm = RingHash; p.Hash.MaxRingSize = MaxRingSize + 1 },
		"max below min":     func(p *Pool) { p.Hash.MaxRingSize = DefaultMinRingSize - 1 },
		"invalid utf-8":     func(p *Pool) { p.Endpoints[0].HashKey = "\xfe" },
		"duplicate address": func(p *Pool) { p.Endpoints = append(p.Endpoints, Endpoint{Host: "10.0.0.1", Port: 80, HashKey: "b"}) },
	} {
		p := good()
		mutate(&p)
		if _, err := Prepare(Fleet{Pools: []Pool{p}}); err == nil {
			t.Errorf("%s: want error", name)
		}
	}
	for n, want := range map[uint64]bool{0: false, 1: false, 2: true, 4: false, DefaultMaglevTableSize: true, MaxMaglevTableSize: true, 65536: false} {
		if IsPrime(n) != want {
			t.Errorf("IsPrime(%d) = %t", n, !want)
		}
	}
}

// The plan sizes Envoy's ring of entries per weight once per table: the
// pool's own (without an exclusive group's members) and each group's.
func TestPlanEnvoyRingSize(t *testing.T) {
	for _, k := range []uint64{0, 64} {
		p := Pool{Name: "chat", Settings: Settings{Port: 10000, Groups: []Group{{Name: "acme", Header: "x-tenant", Values: []string{"acme"}, Replicas: 2, Exclusive: true}},
			Hash: Hash{Algorithm: RingHash, EntriesPerWeight: k, Keys: []HashKey{{Header: "x-session-id"}}}}}
		for i := range 6 {
			p.Endpoints = append(p.Endpoints, Endpoint{Host: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000, Weight: uint32(1 + i%3), HashKey: fmt.Sprintf("r-%d", i)})
		}
		p.Endpoints[4].Health = Draining
		m, err := Prepare(Fleet{Pools: []Pool{p}})
		if err != nil {
			t.Fatal(err)
		}
		pl := m.Plan("chat")
		if k == 0 {
			if pl.EnvoyRingSize != 0 || pl.Groups[0].EnvoyRingSize != 0 {
				t.Errorf("no entries per weight: sizes %d, %d", pl.EnvoyRingSize, pl.Groups[0].EnvoyRingSize)
			}
			continue
		}
		if len(pl.Endpoints)+len(pl.Groups[0].Members) != 6 {
			t.Fatalf("own table of %d, group of %d", len(pl.Endpoints), len(pl.Groups[0].Members))
		}
		if want := k*RingWeight(pl.Endpoints) - 1; pl.EnvoyRingSize != want {
			t.Errorf("own table: size %d, want %d", pl.EnvoyRingSize, want)
		}
		if want := k*RingWeight(pl.Groups[0].Members) - 1; pl.Groups[0].EnvoyRingSize != want {
			t.Errorf("group: size %d, want %d", pl.Groups[0].EnvoyRingSize, want)
		}
	}
}
