package fleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func prefillPool(n int) Pool {
	p := Pool{Name: "p", Settings: Settings{Port: 10001, Balancer: ConsistentHash,
		Hash: Hash{Keys: []HashKey{{Header: "x-session-id"}}}}}
	for i := range n {
		p.Endpoints = append(p.Endpoints, Endpoint{Host: fmt.Sprintf("10.0.1.%d", i+1), Port: 8000,
			HashKey: fmt.Sprintf("prefill-%d", i), Weight: 1, Health: Healthy})
	}
	return p
}

// slotHosts maps each slot to its host's address.
func slotHosts(t *SlotTable) []string {
	out := make([]string, len(t.Slots))
	for s := range t.Slots {
		out[s] = t.Host(s)
	}
	return out
}

func TestPrefillTableBalanceAndStability(t *testing.T) {
	for _, n := range []int{1, 3, 8, 32} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p := prefillPool(n)
			tab := NewSlotTable(&p, &Pool{})
			if len(tab.Hosts) != n || len(tab.Slots) != PrefillSlots {
				t.Fatalf("%d hosts, %d slots", len(tab.Hosts), len(tab.Slots))
			}
			// Each host's share exact: the ideal rounded up or down (plain
			// rendezvous left 115–141 slots over 8 hosts).
			lo, hi := PrefillSlots/n, (PrefillSlots+n-1)/n
			for i, c := range tab.Shares() {
				if c < lo || c > hi {
					t.Errorf("host %s holds %d slots, want %d–%d", tab.Hosts[i], c, lo, hi)
				}
			}
			// Deterministic whatever the endpoints' order.
			q := prefillPool(n)
			for i, j := 0, len(q.Endpoints)-1; i < j; i, j = i+1, j-1 {
				q.Endpoints[i], q.Endpoints[j] = q.Endpoints[j], q.Endpoints[i]
			}
			if a, b := tab.EncodeSlots(), NewSlotTable(&q, &Pool{}).EncodeSlots(); a != b {
				t.Error("the table depends on the endpoints' order")
			}
			before := slotHosts(tab)
			// A replica joining takes its share, and moves few other slots:
			// those a full host passes on (measured: 5 at 3 hosts, 16 at
			// 8, 19 at 32).
			j := prefillPool(n + 1)
			joiner := j.Endpoints[n].Address()
			took, other := 0, 0
			for s, h := range slotHosts(NewSlotTable(&j, &Pool{})) {
				switch {
				case h == joiner:
					took++
				case h != before[s]:
					other++
				}
			}
			if want := PrefillSlots / (n + 1); took < want || other > maxPassedOn {
				t.Errorf("join: the new host took %d slots (want %d), %d others moved (at most %d)", took, want, other, maxPassedOn)
			}
			if n == 1 {
				return
			}
			// A replica leaving (or draining) frees its own slots, and few
			// others move (4 at 3 hosts, 16 at 8, 28 at 32).
			gone := p.Endpoints[1].Address()
			d := prefillPool(n)
			d.Endpoints[1].Health = Draining
			other = 0
			for s, h := range slotHosts(NewSlotTable(&d, &Pool{})) {
				if h == gone {
					t.Fatalf("leave: slot %d still on %s", s, gone)
				}
				if before[s] != gone && h != before[s] {
					other++
				}
			}
			if other > maxPassedOn {
				t.Errorf("leave: %d slots of other hosts moved (at most %d)", other, maxPassedOn)
			}
		})
	}
}

// maxPassedOn bounds the slots a join or a leave moves beyond the
// replica's own: 5% of the table.
const maxPassedOn = PrefillSlots / 20

func TestPrefillTableWeightsAndRoles(t *testing.T) {
	p := prefillPool(3)
	p.Endpoints[0].Weight = 3
	tab := NewSlotTable(&p, &Pool{})
	sh := tab.Shares()
	if r := float64(sh[0]) / float64(sh[1]+sh[2]) * 2; r < 2.2 || r > 3.8 {
		t.Errorf("weight 3 against two of weight 1: shares %v (ratio %.2f)", sh, r)
	}
	// Scaling every weight changes nothing.
	q := prefillPool(3)
	for i := range q.Endpoints {
		q.Endpoints[i].Weight = p.Endpoints[i].Weight * 100
	}
	if NewSlotTable(&q, &Pool{}).EncodeSlots() != tab.EncodeSlots() {
		t.Error("scaling every weight moved slots")
	}
	// A replica the decode pool also lists decodes: it is not in the table.
	decode := &Pool{Endpoints: []Endpoint{{Host: "10.0.1.2", Port: 8000}}}
	tab = NewSlotTable(&p, decode)
	if strings.Join(tab.Hosts, ",") != "10.0.1.1:8000,10.0.1.3:8000" {
		t.Errorf("hosts %v, want the replica in both roles left out", tab.Hosts)
	}
	// No serving replica: an empty table, and decode prefills locally.
	for i := range p.Endpoints {
		p.Endpoints[i].Health = Unhealthy
	}
	if tab := NewSlotTable(&p, &Pool{}); len(tab.Hosts) != 0 || len(tab.Slots) != 0 || tab.Host(0) != "" {
		t.Errorf("table of no replica: %+v", tab)
	}
}

func TestPrepareBuildsPrefillTables(t *testing.T) {
	pp := prefillPool(4)
	pp.Name = "chat-prefill"
	decode := Pool{Name: "chat", Settings: Settings{Port: 10000, Balancer: LeastRequest,
		Prefill: &Prefill{Pool: "chat-prefill", Header: DefaultPrefillHeader}},
		Endpoints: []Endpoint{{Host: "10.0.0.1", Port: 8000}}}
	m, err := Prepare(Fleet{Pools: []Pool{decode, pp}})
	if err != nil {
		t.Fatal(err)
	}
	got := m.Fleet().Pools[0]
	if got.Name != "chat" || got.PrefillTable == nil || len(got.PrefillTable.Hosts) != 4 ||
		got.PrefillTable.Keys[0].Header != "x-session-id" {
		t.Fatalf("decode pool after Prepare: %+v", got)
	}
	for _, tc := range []struct {
		name string
		edit func(d, p *Pool)
		want string
	}{
		{"unknown", func(d, p *Pool) { d.Prefill.Pool = "nope" }, `prefill pool "nope" does not exist`},
		{"itself", func(d, p *Pool) { d.Prefill.Pool = "chat" }, "prefills on itself"},
		{"not hashed", func(d, p *Pool) { p.Balancer = RoundRobin }, "does not hash"},
		{"chained", func(d, p *Pool) { p.Prefill = &Prefill{Pool: "chat", Header: "x-p"} }, "has a prefill pool of its own"},
		{"header", func(d, p *Pool) { d.Prefill.Header = "Host" }, `'H' is not allowed`},
		{"reserved", func(d, p *Pool) { d.Prefill.Header = "x-envoy-original-path" }, "reserved"},
		{"negative", func(d, p *Pool) { d.Prefill.MinBodyBytes = -1 }, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, p := decode, pp
			pf := *decode.Prefill
			d.Prefill = &pf
			tc.edit(&d, &p)
			_, err := Prepare(Fleet{Pools: []Pool{d, p}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Prepare: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestSlotTableWent: a table whose load is observed names the keys sent
// away from their slot's replica by the index of the replica they went
// to, sorted by key; keys whose replica serves no slot are left out, and
// past MaxWent the latest are kept.
func TestSlotTableWent(t *testing.T) {
	p := prefillPool(3)
	p.Hash.BalanceFactor, p.Hash.BalanceOn, p.Hash.LoadInterval = 150, BalanceOnPromptBytes, DefaultLoadInterval
	p.Went = map[string]KeyWent{
		"0000000b": {Host: "10.0.1.3:8000", At: 5},
		"0000000a": {Host: "10.0.1.2:8000", At: 9},
		"0000000c": {Host: "10.0.9.9:8000", At: 9}, // not in the pool
	}
	p.Seen = "8000"
	if tab := NewSlotTable(&p, &Pool{}); tab.Went != nil || tab.Seen != "" {
		t.Errorf("a table without load names keys: %v, %q", tab.Went, tab.Seen)
	}
	p.LoadAt = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	tab := NewSlotTable(&p, &Pool{})
	want := []WentKey{{"0000000a", 1}, {"0000000b", 2}}
	if !slices.Equal(tab.Went, want) {
		t.Errorf("went %v, want %v", tab.Went, want)
	}
	if tab.Seen != p.Seen {
		t.Errorf("seen %q, want the pool's %q", tab.Seen, p.Seen)
	}
	p.Went = map[string]KeyWent{}
	for i := range MaxWent + 1 {
		p.Went[fmt.Sprintf("%08x", i)] = KeyWent{Host: "10.0.1.1:8000", At: int64(MaxWent + 1 - i)}
	}
	tab = NewSlotTable(&p, &Pool{})
	if len(tab.Went) != MaxWent || tab.Went[0].Key != "00000000" || tab.Went[MaxWent-1].Key != fmt.Sprintf("%08x", MaxWent-1) {
		t.Errorf("%d keys named, from %v to %v; want the %d latest", len(tab.Went), tab.Went[0], tab.Went[len(tab.Went)-1], MaxWent)
	}
}
