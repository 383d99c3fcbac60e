package fleet

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// adapterPool is a hash pool of n replicas "r-0".."r-(n-1)" placing
// adapters with slots slots per replica.
func adapterPool(n, slots int, adapters ...Adapter) Pool {
	p := Pool{Name: "chat", Settings: Settings{Port: 10000, Hash: Hash{Keys: []HashKey{{Header: "x-session-id"}}},
		LoRA: &Adapters{MaxLoRA: slots, BaseModels: []string{"base"}}}, Adapters: adapters}
	for i := range n {
		p.Endpoints = append(p.Endpoints, Endpoint{Host: fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), Port: 8000, HashKey: fmt.Sprintf("r-%d", i)})
	}
	return p
}

func prepareOne(t *testing.T, p Pool) (Model, Plan) {
	t.Helper()
	m, err := Prepare(Fleet{Pools: []Pool{p}})
	if err != nil {
		t.Fatal(err)
	}
	return m, m.Plan(p.Name)
}

// placement maps each adapter to its members' identities.
func placement(pl Plan) map[string][]string {
	out := map[string][]string{}
	for _, a := range pl.Adapters {
		out[a.Name] = memberIDs(a.Members)
	}
	return out
}

// Each adapter takes its top-ranked replicas with a free slot, the
// largest shares first, and no replica holds more placed adapters than its
// slots less the tail's; adapters that find no slot join the tail, each on
// its first-ranked replica.
func TestAdapterPlacementCapacity(t *testing.T) {
	for _, tc := range []struct {
		name             string
		replicas, slots  int
		adapters         []Adapter
		engineSlots      map[int]int // replica index → reported max_lora
		wantTail         []string
		wantMembersTotal int
	}{
		{name: "room for all", replicas: 8, slots: 12, adapters: ads(10, 2), wantMembersTotal: 20},
		{name: "the tail keeps a slot", replicas: 4, slots: 2, adapters: ads(8, 1), wantTail: []string{"a-4", "a-5", "a-6", "a-7"}, wantMembersTotal: 8},
		{name: "one slot keeps none", replicas: 4, slots: 1, adapters: ads(6, 1), wantTail: []string{"a-4", "a-5"}, wantMembersTotal: 6},
		{name: "partial when full", replicas: 4, slots: 1, adapters: []Adapter{{Name: "big", Replicas: 3, Share: 0.6}, {Name: "small", Replicas: 2, Share: 0.1}}, wantMembersTotal: 4},
		{name: "engine slots believed", replicas: 4, slots: 1, adapters: ads(6, 1), engineSlots: map[int]int{0: 8, 1: 8}, wantMembersTotal: 6},
		{name: "busiest first", replicas: 2, slots: 8, adapters: []Adapter{{Name: "z", Replicas: 2, Share: 0.5}, {Name: "y", Replicas: 2, Share: 0.01}, {Name: "x", Replicas: 1, Share: 0.2}, {Name: "w", Replicas: 1, Share: 0.05}},
			wantTail: []string{"y"}, wantMembersTotal: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := adapterPool(tc.replicas, tc.slots, tc.adapters...)
			for i, s := range tc.engineSlots {
				p.Endpoints[i].MaxLoRA = s
			}
			m, pl := prepareOne(t, p)
			n := m.Fleet().Pools[0]
			if len(pl.Adapters) != len(tc.adapters) {
				t.Fatalf("%d adapter plans, want %d", len(pl.Adapters), len(tc.adapters))
			}
			placed := map[string]int{}
			total := 0
			var tail []string
			for _, a := range pl.Adapters {
				if a.Cluster != "chat/adapter/"+a.Name {
					t.Errorf("adapter %s: cluster %q", a.Name, a.Cluster)
				}
				total += len(a.Members)
				if len(a.Members) == 0 {
					t.Errorf("adapter %s has no member", a.Name)
				}
				if !a.OverCapacity {
					for _, e := range a.Members {
						placed[e.HashKey]++
					}
					continue
				}
				tail = append(tail, a.Name)
				first := n.Endpoints[AdapterRanking(&n, a.Name)[0]].HashKey
				if ids := memberIDs(a.Members); !slices.Equal(ids, []string{first}) {
					t.Errorf("tail adapter %s on %v, want its first-ranked replica %s", a.Name, ids, first)
				}
			}
			if total != tc.wantMembersTotal {
				t.Errorf("%d members in all, want %d: %v", total, tc.wantMembersTotal, placement(pl))
			}
			if !slices.Equal(tail, tc.wantTail) {
				t.Errorf("tail %v, want %v", tail, tc.wantTail)
			}
			for _, e := range n.Endpoints {
				if slots := n.LoRA.Slots(&e); placed[e.HashKey] > slots-TailSlots(slots) {
					t.Errorf("replica %s holds %d placed adapters, above its %d slots less %d for the tail", e.HashKey, placed[e.HashKey], slots, TailSlots(slots))
				}
			}
		})
	}
}

func TestTailSlots(t *testing.T) {
	for n, want := range map[int]int{1: 0, 2: 1, 3: 2, 4: 3, 8: 6, 12: 9} {
		if got := TailSlots(n); got != want {
			t.Errorf("TailSlots(%d) = %d, want %d", n, got, want)
		}
	}
}

// An adapter in the tail before and after a change of shares stays on
// its replica, whatever the order of the others.
func TestAdapterTailStable(t *testing.T) {
	before := ads(40, 1)
	after := slices.Clone(before)
	for i := range after {
		after[i].Share = float64((i*7)%40+1) / 100 // reordered
	}
	_, pb := prepareOne(t, adapterPool(8, 4, before...))
	_, pa := prepareOne(t, adapterPool(8, 4, after...))
	tail := 0
	for i := range pb.Adapters {
		b, a := pb.Adapters[i], pa.Adapters[i]
		if b.OverCapacity && a.OverCapacity {
			tail++
			if !slices.Equal(memberIDs(b.Members), memberIDs(a.Members)) {
				t.Errorf("tail adapter %s moved: %v → %v", b.Name, memberIDs(b.Members), memberIDs(a.Members))
			}
		}
	}
	if tail < 20 {
		t.Errorf("only %d adapters in the tail both times", tail)
	}
}

// ads are n adapters "a-0".."a-(n-1)" of decreasing share, each on
// replicas replicas.
func ads(n, replicas int) []Adapter {
	out := make([]Adapter, n)
	for i := range out {
		out[i] = Adapter{Name: fmt.Sprintf("a-%d", i), Replicas: replicas, Share: float64(n-i) / 100}
	}
	return out
}

// With free slots, a replica leaving moves only the adapters it was a
// member of, each by one replica; a replica joining enters only adapters
// that rank it among their members. A draining member keeps its place.
// (32 slots: a quarter, 8, for placed adapters, more than they need.)
func TestAdapterPlacementStable(t *testing.T) {
	adapters := ads(12, 2)
	_, base := prepareOne(t, adapterPool(16, 32, adapters...))
	before := placement(base)
	for i := range 16 {
		id := fmt.Sprintf("r-%d", i)
		t.Run("leave "+id, func(t *testing.T) {
			p := adapterPool(16, 32, adapters...)
			p.Endpoints = slices.Delete(p.Endpoints, i, i+1)
			_, pl := prepareOne(t, p)
			for name, ms := range placement(pl) {
				had := slices.Contains(before[name], id)
				gone := diff(before[name], ms)
				came := diff(ms, before[name])
				switch {
				case !had && (len(gone) > 0 || len(came) > 0):
					t.Errorf("%s moved without having %s: %v → %v", name, id, before[name], ms)
				case had && (len(gone) != 1 || len(came) != 1):
					t.Errorf("%s lost %s: %v → %v, want one replica in its place", name, id, before[name], ms)
				}
			}
		})
		t.Run("drain "+id, func(t *testing.T) {
			p := adapterPool(16, 32, adapters...)
			p.Endpoints[i].Health = Draining
			_, pl := prepareOne(t, p)
			for name, ms := range placement(pl) {
				if slices.Contains(before[name], id) {
					if !slices.Contains(ms, id) || len(ms) != 3 {
						t.Errorf("%s: draining member %s should stay beside a stand-in: %v → %v", name, id, before[name], ms)
					}
				} else if !slices.Equal(ms, before[name]) {
					t.Errorf("%s moved: %v → %v", name, before[name], ms)
				}
			}
		})
		t.Run("saturate "+id, func(t *testing.T) {
			p := adapterPool(16, 32, adapters...)
			p.Endpoints[i].Health, p.Endpoints[i].Saturated = Draining, true
			_, pl := prepareOne(t, p)
			if got := placement(pl); !maps.EqualFunc(got, before, slices.Equal) {
				t.Errorf("a saturated replica moved adapters: %v → %v", before, got)
			}
			for _, a := range pl.Adapters {
				for _, e := range a.Members {
					if e.Health != Healthy {
						t.Errorf("%s: member %s served %s, want healthy", a.Name, e.HashKey, e.Health)
					}
				}
			}
		})
	}
	// The ranking is apart from a tenant group's of the same name.
	p := adapterPool(16, 32)
	n, _ := prepareOne(t, p)
	gm := memberIDs(GroupMembers(&n.Fleet().Pools[0], Group{Name: "a-0", Replicas: 2}))
	if slices.Equal(gm, before["a-0"]) {
		t.Errorf("adapter a-0 and group a-0 rank alike: %v", gm)
	}
}

// A saturated member keeps its place and is served healthy; a replica
// that is draining to leave, degraded or unhealthy gets a stand-in.
func TestAdapterSaturatedMembers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		replicas  int
		health    []Health // of the adapter's ranked members, in rank order
		saturated []bool
		want      int // members
		served    []Health
	}{
		{"saturated of two", 2, []Health{Draining, Healthy}, []bool{true, false}, 2, []Health{Healthy, Healthy}},
		{"all saturated", 2, []Health{Draining, Draining}, []bool{true, true}, 2, []Health{Healthy, Healthy}},
		{"the only one saturated", 1, []Health{Draining}, []bool{true}, 1, []Health{Healthy}},
		{"draining to leave", 1, []Health{Draining, Healthy}, []bool{false, false}, 2, []Health{Draining, Healthy}},
		{"unhealthy beside saturated", 2, []Health{Unhealthy, Draining, Healthy}, []bool{false, true, false}, 3, []Health{Unhealthy, Healthy, Healthy}},
		{"degraded", 1, []Health{Degraded, Healthy}, []bool{false, false}, 2, []Health{Degraded, Healthy}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := adapterPool(8, 4, Adapter{Name: "sql", Replicas: tc.replicas, Share: 0.1})
			n, _ := prepareOne(t, p)
			rank := AdapterRanking(&n.Fleet().Pools[0], "sql")
			byKey := map[string]int{}
			for j, h := range tc.health {
				e := &p.Endpoints[rank[j]]
				e.Health, e.Saturated = h, tc.saturated[j]
				byKey[e.HashKey] = j
			}
			_, pl := prepareOne(t, p)
			ms := pl.Adapters[0].Members
			if len(ms) != tc.want {
				t.Fatalf("%d members %v, want %d", len(ms), memberIDs(ms), tc.want)
			}
			for _, e := range ms {
				j, ok := byKey[e.HashKey]
				if !ok {
					t.Errorf("member %s is not among the first-ranked %d", e.HashKey, len(tc.health))
					continue
				}
				if e.Health != tc.served[j] {
					t.Errorf("member %s (rank %d) served %s, want %s", e.HashKey, j, e.Health, tc.served[j])
				}
			}
		})
	}
}

// Bad adapters are dropped with a reason, never failing the push.
func TestAdapterDrops(t *testing.T) {
	long := strings.Repeat("x", MaxAdapterName+1)
	p := adapterPool(4, 2,
		Adapter{Name: "ok", Replicas: 1, Share: 0.2},
		Adapter{Name: "ok", Replicas: 2, Share: 0.1},
		Adapter{Name: "has space", Replicas: 1},
		Adapter{Name: long, Replicas: 1},
		Adapter{Name: "", Replicas: 1},
		Adapter{Name: "base", Replicas: 1},
		Adapter{Name: "zero", Replicas: 0},
		Adapter{Name: "nan", Replicas: 1, Share: 2},
	)
	m, pl := prepareOne(t, p)
	if got := placement(pl); !reflect.DeepEqual(slices.Sorted(maps.Keys(got)), []string{"ok"}) {
		t.Errorf("placed %v, want only ok", got)
	}
	reasons := map[string]string{}
	for _, d := range m.AdapterDrops() {
		reasons[d.Adapter.Name] = d.Reason
	}
	for name, want := range map[string]string{
		"ok": "repeats", "has space": "printable", long: "above 128", "": "empty", "base": "base model", "zero": "replicas 0", "nan": "share 2",
	} {
		if !strings.Contains(reasons[name], want) {
			t.Errorf("drop of %q: reason %q, want it to say %q", name, reasons[name], want)
		}
	}
	// Beyond max: the highest shares stay.
	p = adapterPool(4, 2, ads(5, 1)...)
	p.LoRA.Max = 3
	m, pl = prepareOne(t, p)
	if got := slices.Sorted(maps.Keys(placement(pl))); !slices.Equal(got, []string{"a-0", "a-1", "a-2"}) {
		t.Errorf("placed %v, want the three largest", got)
	}
	if len(m.AdapterDrops()) != 2 {
		t.Errorf("drops %v, want 2", m.AdapterDrops())
	}
	// A pool without adapter settings places none.
	p = adapterPool(4, 2, ads(2, 1)...)
	p.LoRA = nil
	m, pl = prepareOne(t, p)
	if len(pl.Adapters) != 0 || len(m.AdapterDrops()) != 2 {
		t.Errorf("without settings: plans %v, drops %v", pl.Adapters, m.AdapterDrops())
	}
}

// The settings and placement survive JSON, durations as strings.
func TestAdaptersJSON(t *testing.T) {
	p := adapterPool(2, 2, ads(2, 1)...)
	p.Endpoints[0].MaxLoRA = 3
	m, _ := prepareOne(t, p)
	b, err := json.Marshal(m.Fleet())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"interval":"10s"`) || !strings.Contains(string(b), `"max_lora":3`) {
		t.Errorf("JSON %s lacks the interval or the engine's max_lora", b)
	}
	var back Fleet
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m.Fleet()) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", back, m.Fleet())
	}
}

// A pick table's adapter entries name each adapter's serving replicas
// and the next AdapterRankLen of its ranking, as indexes into the
// table's hosts; a member the table does not serve (taken out by the
// escape hatch) is left out, and its replicas' next-ranked take over.
func TestPickAdapters(t *testing.T) {
	p := adapterPool(12, 4, Adapter{Name: "sql", Replicas: 2, Share: 0.3}, Adapter{Name: "chat", Replicas: 1, Share: 0.1})
	p.Hash.BalanceFactor, p.Hash.BalanceOn = 150, BalanceOnPromptBytes
	check := func(p Pool, pl Plan) map[string]AdapterPick {
		t.Helper()
		tab := NewSlotTable(&p, &Pool{})
		tab.PickAdapters(&p, pl.Adapters)
		for _, a := range pl.Adapters {
			e := tab.Adapters[a.Name]
			var members []string
			for _, m := range a.Members {
				if slices.Contains(tab.Hosts, m.Address()) {
					members = append(members, m.Address())
				}
			}
			var got []string
			for _, j := range e.Members {
				got = append(got, tab.Hosts[j])
			}
			slices.Sort(members)
			if !slices.Equal(got, members) {
				t.Errorf("%s: members %v, want the served %v", a.Name, got, members)
			}
			var rank []string
			for _, i := range AdapterRanking(&p, a.Name) {
				if h := p.Endpoints[i].Address(); slices.Contains(tab.Hosts, h) && !slices.Contains(members, h) && len(rank) < AdapterRankLen {
					rank = append(rank, h)
				}
			}
			got = got[:0]
			for _, j := range e.Rank {
				got = append(got, tab.Hosts[j])
			}
			if !slices.Equal(got, rank) || len(rank) != AdapterRankLen {
				t.Errorf("%s: rank %v, want %v", a.Name, got, rank)
			}
		}
		return tab.Adapters
	}
	m, pl := prepareOne(t, p)
	before := check(m.Fleet().Pools[0], pl)
	// The first member of sql saturated: served in sql's cluster, not in
	// the pool's table, so not in the entry.
	id := pl.Adapters[slices.IndexFunc(pl.Adapters, func(a AdapterPlan) bool { return a.Name == "sql" })].Members[0].Identity()
	for i := range p.Endpoints {
		if p.Endpoints[i].Identity() == id {
			p.Endpoints[i].Health, p.Endpoints[i].Saturated = Draining, true
		}
	}
	m, pl = prepareOne(t, p)
	after := check(m.Fleet().Pools[0], pl)
	if len(after["sql"].Members) != 1 || len(before["sql"].Members) != 2 {
		t.Errorf("sql's served members: %d before, %d saturated; want 2 then 1", len(before["sql"].Members), len(after["sql"].Members))
	}
}
