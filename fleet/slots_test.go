package fleet

import (
	"fmt"
	"testing"
)

func TestSlotQuotas(t *testing.T) {
	ids := func(ws ...int) [][]uint64 {
		out := make([][]uint64, len(ws))
		for i, w := range ws {
			for k := range w {
				out[i] = append(out[i], uint64(i)<<32|uint64(k)+1)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		n     int
		seeds [][]uint64
		want  []int
	}{
		{"equal, even", 1024, ids(1, 1, 1, 1), []int{256, 256, 256, 256}},
		{"weights 3:1:1", 1024, ids(3, 1, 1), nil},
		{"equal, a remainder", 1024, ids(1, 1, 1, 1, 1, 1), nil},
		{"more hosts than slots", 4, ids(1, 1, 1, 1, 1, 1, 1, 1), nil},
		{"no host", 16, nil, []int{}},
		{"a host with no identity", 4, [][]uint64{{1}, nil, {2}}, []int{2, 0, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := slotQuotas(tc.n, tc.seeds)
			sum, total := 0, 0
			for _, s := range tc.seeds {
				total += len(s)
			}
			for i, v := range q {
				sum += v
				// Each within one of its exact share.
				exact := float64(tc.n*len(tc.seeds[i])) / float64(total)
				if float64(v) < exact-1 || float64(v) > exact+1 {
					t.Errorf("host %d: quota %d, exact share %.2f", i, v, exact)
				}
			}
			if len(tc.seeds) > 0 && sum != tc.n {
				t.Errorf("quotas %v sum to %d, want %d", q, sum, tc.n)
			}
			if tc.want != nil && fmt.Sprint(q) != fmt.Sprint(tc.want) {
				t.Errorf("quotas %v, want %v", q, tc.want)
			}
		})
	}
}

// TestAssignSlotsStable checks the table is a stable assignment: no slot
// ranks a host above its own where that host has room or holds a slot it
// ranks lower. That is what keeps a join or a leave from moving more than
// the slots it must.
func TestAssignSlotsStable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights []uint32
	}{
		{"2 equal", []uint32{1, 1}},
		{"8 equal", []uint32{1, 1, 1, 1, 1, 1, 1, 1}},
		{"5 weighted", []uint32{1, 2, 3, 1, 5}},
		{"40 equal", make40()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := prefillPool(len(tc.weights))
			for i, w := range tc.weights {
				p.Endpoints[i].Weight = w
			}
			tab := NewSlotTable(&p, &Pool{})
			// Rebuild the hosts' identities as NewSlotTable does (hosts by
			// address, identities prefill-i, weights in lowest terms).
			byAddr := map[string]Endpoint{}
			for _, e := range p.Endpoints {
				byAddr[e.Address()] = e
			}
			var g uint32
			for _, w := range tc.weights {
				g = gcd(g, w)
			}
			seeds := make([][]uint64, len(tab.Hosts))
			for i, a := range tab.Hosts {
				e := byAddr[a]
				for k := range e.Weight / g {
					seeds[i] = append(seeds[i], prefillSeed(e.Identity(), int(k)))
				}
			}
			quota := slotQuotas(PrefillSlots, seeds)
			score := func(s, h int) uint64 { return slotScore(seeds[h], s) }
			// The lowest-ranked slot each host holds, and its count.
			held := make([]int, len(seeds))
			lowest := make([]heldSlot, len(seeds))
			for s, h := range tab.Slots {
				in := heldSlot{score(s, int(h)), s}
				if held[h] == 0 || lowest[h].above(in) {
					lowest[h] = in
				}
				held[h]++
			}
			for h, c := range held {
				if c != quota[h] {
					t.Errorf("host %d holds %d slots, quota %d", h, c, quota[h])
				}
			}
			for s, own := range tab.Slots {
				mine := rank{score(s, int(own)), int(own)}
				for h := range seeds {
					r := rank{score(s, h), h}
					if !r.above(mine) {
						continue
					}
					if held[h] < quota[h] || (heldSlot{r.score, s}).above(lowest[h]) {
						t.Fatalf("slot %d on host %d ranks host %d higher, which would take it", s, own, h)
					}
				}
			}
		})
	}
}

func make40() []uint32 {
	w := make([]uint32, 40)
	for i := range w {
		w[i] = 1
	}
	return w
}

// BenchmarkSlotTable times building a pool's table, once per push
// (docs/benchmarks/hot-keys.md#slot-tables-with-exact-shares).
func BenchmarkSlotTable(b *testing.B) {
	for _, n := range []int{8, 100, 1000, 4096} {
		p := prefillPool(n)
		for i := range p.Endpoints {
			p.Endpoints[i].Host = fmt.Sprintf("10.%d.%d.%d", i/65536, (i/256)%256, i%256)
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				NewSlotTable(&p, &Pool{})
			}
		})
	}
}
