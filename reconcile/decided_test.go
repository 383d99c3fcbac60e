package reconcile

import (
	"testing"
	"time"
)

// A leader decides each pool when its interval has passed and reports a
// change only when the decision differs; a follower decides nothing; a
// seeded leader starts from its predecessor's decisions and waits an
// interval; empty decisions are left out of copies.
func TestDecided(t *testing.T) {
	kind := decisionKind[int]{
		equal: func(a, b int) bool { return a == b },
		clone: func(v int) (int, bool) { return v, v != 0 },
	}
	d := newDecided(kind)
	t0 := time.Unix(1000, 0)
	iv := func(name string) time.Duration {
		if name == "a" {
			return 10 * time.Second
		}
		return 30 * time.Second
	}
	calls := map[string]int{}
	value := map[string]int{"a": 1, "b": 0}
	decide := func(name string) int { calls[name]++; return value[name] }
	pools := []string{"b", "a"}

	if changed, next := d.run(pools, iv, t0, false, decide); changed || next != 10*time.Second || len(calls) != 0 {
		t.Fatalf("follower: changed %v, next %v, calls %v", changed, next, calls)
	}
	if changed, next := d.run(pools, iv, t0, true, decide); !changed || next != 10*time.Second || calls["a"] != 1 || calls["b"] != 1 {
		t.Fatalf("leader's first run: changed %v, next %v, calls %v", changed, next, calls)
	}
	if got := d.copy(); len(got) != 1 || got["a"] != 1 {
		t.Errorf("copy %v, want only a's non-empty decision", got)
	}
	// Before a's interval: nothing runs; at it, the same value is no change.
	if changed, next := d.run(pools, iv, t0.Add(4*time.Second), true, decide); changed || next != 6*time.Second || calls["a"] != 1 {
		t.Errorf("early run: changed %v, next %v, calls %v", changed, next, calls)
	}
	if changed, _ := d.run(pools, iv, t0.Add(10*time.Second), true, decide); changed || calls["a"] != 2 || calls["b"] != 1 {
		t.Errorf("a's second run: changed %v, calls %v", changed, calls)
	}
	value["a"] = 2
	if changed, _ := d.run(pools, iv, t0.Add(20*time.Second), true, decide); !changed || d.own["a"] != 2 {
		t.Errorf("a changed: changed %v, own %v", changed, d.own)
	}
	// A new leader starts from the published decisions, an interval on.
	d.seed(map[string]int{"a": 7, "b": 0}, pools, t0.Add(40*time.Second))
	if got := d.copy(); len(got) != 1 || got["a"] != 7 {
		t.Errorf("seeded copy %v", got)
	}
	if _, next := d.run(pools, iv, t0.Add(41*time.Second), true, decide); next != 9*time.Second || calls["a"] != 3 {
		t.Errorf("after the seed: next %v, calls %v", next, calls)
	}
	d.forget("a")
	if _, ok := d.own["a"]; ok {
		t.Error("a forgotten but still decided")
	}
}
