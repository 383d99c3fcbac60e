package fleet

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// placing is a decode pool that places idle slots over n prefill
// replicas, with moves.
func placing(n int, moves []PrefillMove) (*PrefillTable, Pool) {
	p := prefillPool(n)
	d := Pool{Name: "d", Settings: Settings{Prefill: &Prefill{Pool: "p", Header: DefaultPrefillHeader,
		IdleAfter: time.Minute, PlaceEvery: 5 * time.Second}}, PrefillMoves: moves}
	return NewPrefillTable(&p, &d), p
}

// load makes a slot load where slots for which busy says so carry rate.
func load(n int, busy func(s int) (bool, float64)) SlotLoad {
	l := SlotLoad{Idle: make([]bool, n), Rate: make([]float64, n)}
	for s := range n {
		b, r := busy(s)
		l.Idle[s], l.Rate[s] = !b, r
	}
	return l
}

// idleHeld counts each host's idle slots in t once moves are applied.
func idleHeld(t *PrefillTable, l SlotLoad) []int {
	out := make([]int, len(t.Hosts))
	for s, h := range t.Slots {
		if l.Idle[s] {
			out[h]++
		}
	}
	return out
}

func TestPlaceIdleSlots(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base, _ := placing(4, nil)
	// Host 0's busy slots carry four times the others' requests.
	heavy := load(PrefillSlots, func(s int) (bool, float64) {
		if s%3 != 0 {
			return false, 0
		}
		if base.Slots[s] == 0 {
			return true, 4
		}
		return true, 1
	})
	even := load(PrefillSlots, func(s int) (bool, float64) { return s%3 == 0, 1 + rng.Float64()*0.1 })
	for _, tc := range []struct {
		name string
		l    SlotLoad
		max  int
		// moved: whether anything moves; lighter: host 0 ends with
		// fewer idle slots than each other host.
		moved, lighter bool
	}{
		{"even load: the dead band moves nothing", even, 1024, false, false},
		{"one host four times as loaded", heavy, 1024, true, true},
		{"at most max moves", heavy, 10, true, false},
		{"no busy slot", load(PrefillSlots, func(int) (bool, float64) { return false, 0 }), 1024, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			moves := PlaceIdleSlots(base, tc.l, tc.max)
			if got := len(moves) > 0; got != tc.moved {
				t.Fatalf("%d moves, want some: %v", len(moves), tc.moved)
			}
			if len(moves) > tc.max {
				t.Errorf("%d moves, above %d", len(moves), tc.max)
			}
			if !slices.IsSortedFunc(moves, func(a, b PrefillMove) int { return a.Slot - b.Slot }) {
				t.Errorf("moves not sorted by slot: %v", moves)
			}
			after, _ := placing(4, moves)
			for s := range after.Slots {
				if !tc.l.Idle[s] && after.Slots[s] != base.Slots[s] {
					t.Errorf("busy slot %d moved from %s to %s", s, base.Host(s), after.Host(s))
				}
			}
			if after.Moved != len(moves) {
				t.Errorf("table counts %d moved slots, want %d", after.Moved, len(moves))
			}
			if tc.lighter {
				held := idleHeld(after, tc.l)
				for h := 1; h < len(held); h++ {
					if held[0] >= held[h] {
						t.Errorf("the loaded host holds %d idle slots, host %d %d: %v", held[0], h, held[h], held)
					}
				}
			}
			if again := PlaceIdleSlots(base, tc.l, tc.max); !slices.Equal(again, moves) {
				t.Errorf("placed twice, differently")
			}
		})
	}
}

// Placing again from a table with moves is stable, and an idle slot
// moved away goes back to its rendezvous replica once that one takes
// slots; a move to a replica that left is dropped.
func TestPlaceIdleSlotsHistory(t *testing.T) {
	base, _ := placing(4, nil)
	busy := func(heavy uint16) SlotLoad {
		return load(PrefillSlots, func(s int) (bool, float64) {
			if s%4 != 0 {
				return false, 0
			}
			if base.Slots[s] == heavy {
				return true, 5
			}
			return true, 1
		})
	}
	first := PlaceIdleSlots(base, busy(0), 1024)
	moved, _ := placing(4, first)
	if again := PlaceIdleSlots(moved, busy(0), 1024); !slices.Equal(again, first) {
		t.Errorf("placing the placed table again moved %d slots to %d", len(first), len(again))
	}
	// Host 1 is now the heavy one: slots taken from host 0 go home.
	second := PlaceIdleSlots(moved, busy(1), 1024)
	back := 0
	for _, m := range first {
		if !slices.ContainsFunc(second, func(n PrefillMove) bool { return n.Slot == m.Slot }) && base.Host(m.Slot) == base.Hosts[0] {
			back++
		}
	}
	if back == 0 {
		t.Errorf("no slot went back to host 0 when host 1 became the loaded one")
	}
	// A host leaving drops the moves to it.
	var to1 []PrefillMove
	for _, m := range first {
		if m.Host == base.Hosts[1] {
			to1 = append(to1, m)
		}
	}
	if len(to1) == 0 {
		t.Fatal("no move to host 1")
	}
	p := prefillPool(4)
	p.Endpoints[1].Health = Unhealthy
	d := Pool{Settings: Settings{Prefill: &Prefill{IdleAfter: time.Minute, PlaceEvery: time.Second}}, PrefillMoves: first}
	left := NewPrefillTable(&p, &d)
	for _, m := range to1 {
		if left.Host(m.Slot) == m.Host {
			t.Errorf("slot %d still on %s, which left", m.Slot, m.Host)
		}
	}
	// Without placement on, moves are ignored.
	d.Prefill.IdleAfter = 0
	if off := NewPrefillTable(&p, &d); off.Moved != 0 {
		t.Errorf("%d slots moved with placement off", off.Moved)
	}
}
