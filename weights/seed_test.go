package weights

import (
	"maps"
	"testing"
	"time"
)

// A decider seeded with another's decisions decides the same at once,
// whatever its first observations say within the damping: weights wait
// MinChangeInterval, saturated replicas wait for a calm run and Hold.
func TestSeedCarriesDecisionsOver(t *testing.T) {
	cfg := DefaultConfig()
	t0 := time.Unix(1_700_000_000, 0)
	prev := map[string]Decision{
		"a": {Weight: 1},
		"b": {Weight: 3},
		"c": {Weight: 4, Saturated: true},
		"d": {Weight: 4},
		"e": {Weight: 2, Stale: true}, // carries nothing
	}
	ids := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		name string
		obs  []Observation
	}{
		{name: "no observation yet"},
		{name: "idle readings", obs: []Observation{
			{ID: "a", Time: t0.Add(time.Second), Signals: idle()},
			{ID: "b", Time: t0.Add(time.Second), Signals: idle()},
			{ID: "c", Time: t0.Add(time.Second), Signals: idle()},
			{ID: "d", Time: t0.Add(time.Second), Signals: idle()},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, res := Step(cfg, Seed(cfg, prev, t0), ids, tc.obs, t0.Add(time.Second))
			want := maps.Clone(prev)
			delete(want, "e")
			for id, w := range want {
				if got := res.Decisions[id]; got != w {
					t.Errorf("%s = %+v, want %+v", id, got, w)
				}
			}
			if res.Decisions["e"].Weight == 0 {
				t.Error("e has no decision")
			}
		})
	}

	// After MinChangeInterval and Hold, readings govern again.
	s := Seed(cfg, prev, t0)
	var res Result
	for i := range 40 {
		at := t0.Add(time.Duration(i+1) * 2 * time.Second)
		var obs []Observation
		for _, id := range ids {
			obs = append(obs, Observation{ID: id, Time: at, Signals: idle()})
		}
		s, res = Step(cfg, s, ids, obs, at)
	}
	for _, id := range ids {
		if d := res.Decisions[id]; d.Weight != cfg.MaxWeight || d.Saturated {
			t.Errorf("after the damping, %s = %+v, want an idle replica's full weight", id, d)
		}
	}
}

func TestLevelOf(t *testing.T) {
	cfg := DefaultConfig() // weights 1, 2, 3, 4
	for w, want := range map[uint32]int{0: 0, 1: 0, 2: 1, 3: 2, 4: 3, 9: 3} {
		if got := cfg.levelOf(w); got != want {
			t.Errorf("levelOf(%d) = %d, want %d", w, got, want)
		}
	}
}

// idle is a replica with an empty queue and little KV in use.
func idle() Signals { s := absentSignals(); s.QueueDepth, s.KVOccupancy = 0, 0.1; return s }
