package hotkeys

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvxds/kvxds/fleet"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func settings() *fleet.HotKeys {
	return &fleet.HotKeys{Max: fleet.DefaultHotKeysMax, HalfLife: time.Minute, Interval: 10 * time.Second}
}

// feed observes n requests spread over d from t, the i-th of key value
// pick(i).
func feed(s *Sketch, t time.Time, d time.Duration, n int, pick func(i int) string) {
	for i := range n {
		s.Observe(0, pick(i), t.Add(d*time.Duration(i)/time.Duration(n)))
	}
}

func TestValidValue(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{
		{"0123456789abcdef", true},
		{"tenant a", true},
		{"", false},
		{strings.Repeat("x", MaxValueLen), true},
		{strings.Repeat("x", MaxValueLen+1), false},
		{"tab\there", false},
		{"é", false},
		{"nul\x00", false},
	} {
		if got := ValidValue(tc.v); got != tc.want {
			t.Errorf("ValidValue(%q) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		share   float64
		healthy int
		want    int
	}{
		{0.01, 8, 16},    // fills one replica: 16 buckets
		{0.125, 8, 16},   // exactly one replica's share
		{0.2, 8, 32},     // two replicas
		{0.5, 8, 64},     // four replicas
		{0.9, 8, 128},    // eight replicas: 128, the cap of 16 × 8
		{1, 8, 128},      // all of it
		{0.9, 2, 32},     // 2 replicas: ceil(1.8)=2 → 32, cap 32
		{1, 1, 16},       // one replica: cap 16
		{0.9, 100, 256},  // capped by MaxSpread
		{0.3, 3, 16},     // ceil(0.9)=1 → 16
		{0.01, 100, 16},  // a big pool: still 16 for one replica's worth
		{0.05, 100, 128}, // ceil(5)=5 → 80 → 128
	} {
		if got := Spread(tc.share, tc.healthy); got != tc.want {
			t.Errorf("Spread(%v, %d) = %d, want %d", tc.share, tc.healthy, got, tc.want)
		}
	}
}

func TestObserveDrops(t *testing.T) {
	s := NewSketch(time.Minute)
	for _, v := range []string{"", strings.Repeat("k", 200), "bad\x01", "ok"} {
		s.Observe(0, v, t0)
	}
	s.Observe(-1, "ok", t0)
	if got := s.Dropped(); got != 4 {
		t.Errorf("Dropped() = %d, want 4", got)
	}
	if got := s.Len(); got != 1 {
		t.Errorf("Len() = %d, want 1", got)
	}
	if got := s.Total(t0); got != 1 {
		t.Errorf("Total() = %v, want 1", got)
	}
}

func TestDecay(t *testing.T) {
	s := NewSketch(time.Minute)
	for range 100 {
		s.Observe(0, "a", t0)
	}
	for _, tc := range []struct {
		after time.Duration
		want  float64
	}{{0, 100}, {time.Minute, 50}, {2 * time.Minute, 25}, {10 * time.Minute, 100.0 / 1024}} {
		if got := s.Total(t0.Add(tc.after)); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Total after %v = %v, want %v", tc.after, got, tc.want)
		}
	}
	// Hours of traffic rescale the counts without changing shares.
	for i := range 1000 {
		s.Observe(0, "b", t0.Add(time.Duration(i)*10*time.Second))
	}
	est, total := s.Shares(t0.Add(10000*time.Second), 0.99)
	if len(est) != 1 || est[0].Value != "b" {
		t.Fatalf("after hours only b should remain: %v", est)
	}
	if total < 5 || total > 100 || math.IsInf(total, 0) || math.IsNaN(total) {
		t.Errorf("decayed total %v out of range", total)
	}
}

func TestDecide(t *testing.T) {
	zipf := func(s *Sketch) {
		// 40% "hot", 15% "warm", the rest over 2,000 cold keys.
		r := rand.New(rand.NewPCG(1, 2))
		feed(s, t0, 10*time.Second, 20000, func(int) string {
			switch x := r.Float64(); {
			case x < 0.40:
				return "hot"
			case x < 0.55:
				return "warm"
			default:
				return fmt.Sprintf("cold-%d", r.IntN(2000))
			}
		})
	}
	now := t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name     string
		settings func() *fleet.HotKeys
		healthy  int
		previous []fleet.HotKey
		traffic  func(*Sketch)
		want     []fleet.HotKey // Share checked to 0.02
	}{{
		name: "off", settings: func() *fleet.HotKeys { return nil }, healthy: 8, traffic: zipf,
	}, {
		name: "fair share of 8", settings: settings, healthy: 8, traffic: zipf,
		want: []fleet.HotKey{{Value: "hot", Share: 0.40, Spread: 64}, {Value: "warm", Share: 0.15, Spread: 32}},
	}, {
		name: "explicit share", settings: func() *fleet.HotKeys { s := settings(); s.Share = 0.3; return s }, healthy: 8, traffic: zipf,
		want: []fleet.HotKey{{Value: "hot", Share: 0.40, Spread: 64}},
	}, {
		name: "max 1", settings: func() *fleet.HotKeys { s := settings(); s.Max = 1; return s }, healthy: 8, traffic: zipf,
		want: []fleet.HotKey{{Value: "hot", Share: 0.40, Spread: 64}},
	}, {
		name: "two replicas: nothing above one half", settings: settings, healthy: 2, traffic: zipf,
	}, {
		name: "hysteresis keeps a key above half the share", settings: func() *fleet.HotKeys { s := settings(); s.Share = 0.25; return s }, healthy: 8, traffic: zipf,
		previous: []fleet.HotKey{{Value: "warm", Share: 0.3, Spread: 32}},
		want:     []fleet.HotKey{{Value: "hot", Share: 0.40, Spread: 64}, {Value: "warm", Share: 0.3, Spread: 32}},
	}, {
		name: "same level keeps the entry as it was", settings: settings, healthy: 8, traffic: zipf,
		previous: []fleet.HotKey{{Value: "hot", Share: 0.45, Spread: 64}},
		want:     []fleet.HotKey{{Value: "hot", Share: 0.45, Spread: 64}, {Value: "warm", Share: 0.15, Spread: 32}},
	}, {
		name: "new level replaces the entry", settings: settings, healthy: 8, traffic: zipf,
		previous: []fleet.HotKey{{Value: "hot", Share: 0.9, Spread: 128}},
		want:     []fleet.HotKey{{Value: "hot", Share: 0.40, Spread: 64}, {Value: "warm", Share: 0.15, Spread: 32}},
	}, {
		name: "no traffic keeps the previous table", settings: settings, healthy: 8, traffic: func(*Sketch) {},
		previous: []fleet.HotKey{{Value: "gone", Share: 0.5, Spread: 8}},
		want:     []fleet.HotKey{{Value: "gone", Share: 0.5, Spread: 8}},
	}, {
		name: "too few requests keep the previous table", settings: settings, healthy: 8,
		traffic:  func(s *Sketch) { feed(s, t0, time.Second, 10, func(int) string { return "x" }) },
		previous: []fleet.HotKey{{Value: "gone", Share: 0.5, Spread: 8}},
		want:     []fleet.HotKey{{Value: "gone", Share: 0.5, Spread: 8}},
	}, {
		name: "uniform traffic has no hot key", settings: settings, healthy: 8,
		traffic: func(s *Sketch) { feed(s, t0, 10*time.Second, 10000, func(i int) string { return fmt.Sprint(i % 500) }) },
	}, {
		name: "ties by value", settings: func() *fleet.HotKeys { s := settings(); s.Max = 2; return s }, healthy: 8,
		traffic: func(s *Sketch) {
			feed(s, t0, 10*time.Second, 3000, func(i int) string { return []string{"c", "b", "a"}[i%3] })
		},
		want: []fleet.HotKey{{Value: "a", Share: 1.0 / 3, Spread: 64}, {Value: "b", Share: 1.0 / 3, Spread: 64}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSketch(time.Minute)
			tc.traffic(s)
			got := s.Decide(now, tc.healthy, tc.settings(), tc.previous, nil)
			if len(got) != len(tc.want) {
				t.Fatalf("Decide = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.Key != w.Key || g.Value != w.Value || g.Spread != w.Spread || math.Abs(g.Share-w.Share) > 0.02 {
					t.Errorf("entry %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestDecideCrowded(t *testing.T) {
	// Four replicas: a key is hot by itself from 25%, spread for its
	// replica's sake from 6.25%, and a replica is crowded above 30%.
	// "cold-N" keys (72% over 360 values) hash to replica N mod 4;
	// "a", "b", "c" and "small-N" to replica 0.
	traffic := func(shares map[string]float64) func(*Sketch) {
		return func(s *Sketch) {
			r := rand.New(rand.NewPCG(3, 4))
			feed(s, t0, 10*time.Second, 40000, func(int) string {
				x := r.Float64()
				for _, v := range []string{"a", "b", "c", "hot"} {
					if x < shares[v] {
						return v
					}
					x -= shares[v]
				}
				if x < shares["small"] {
					return fmt.Sprintf("small-%d", r.IntN(8))
				}
				return fmt.Sprintf("cold-%d", r.IntN(360))
			})
		}
	}
	// homeBy's buckets land on replica bucketOn(spread, bucket), home's
	// on bucketOn(bucket).
	homeBy := func(bucketOn func(int, int) int) Home {
		return func(id ID, spread, bucket int) int {
			if spread >= 2 {
				return bucketOn(spread, bucket)
			}
			var n int
			if _, err := fmt.Sscanf(id.Value, "cold-%d", &n); err == nil {
				return n % 4
			}
			return 0
		}
	}
	home := func(bucketOn func(int) int) Home {
		return homeBy(func(_, b int) int { return bucketOn(b) })
	}
	even := func(b int) int { return b % 4 }
	// pileAt32's buckets all land on replica 0 at spread 32, evenly at
	// other spreads.
	pileAt32 := func(spread, b int) int {
		if spread == 32 {
			return 0
		}
		return b % 4
	}
	now := t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name     string
		shares   map[string]float64
		home     Home
		previous []fleet.HotKey
		want     []string
	}{{
		name:   "a crowded replica spreads its largest keys until it is not",
		shares: map[string]float64{"a": 0.10, "b": 0.09, "c": 0.08},
		home:   home(even),
		want:   []string{"a/4", "b/4", "c/4"},
	}, {
		name:   "without homes, shares alone",
		shares: map[string]float64{"a": 0.10, "b": 0.09, "c": 0.08},
	}, {
		name:   "one key is enough",
		shares: map[string]float64{"a": 0.20, "c": 0.04},
		home:   home(even),
		want:   []string{"a/4"},
	}, {
		name:   "the fewest buckets that land best",
		shares: map[string]float64{"a": 0.20, "c": 0.04},
		home:   home(func(b int) int { return 1 + b%2 }),
		want:   []string{"a/2"},
	}, {
		name:   "keys below a quarter of the hot share stay home, however crowded",
		shares: map[string]float64{"small": 0.40},
		home:   home(even),
	}, {
		name:     "a key spread for its replica stays while above half of that",
		shares:   map[string]float64{"a": 0.04},
		home:     home(even),
		previous: []fleet.HotKey{{Value: "a", Share: 0.1, Spread: CrowdSpread}},
		want:     []string{"a/2"},
	}, {
		name:     "and leaves below",
		shares:   map[string]float64{"a": 0.02},
		home:     home(even),
		previous: []fleet.HotKey{{Value: "a", Share: 0.1, Spread: CrowdSpread}},
	}, {
		name:   "a hot key's buckets count where they land",
		shares: map[string]float64{"hot": 0.30, "a": 0.07},
		home:   home(func(int) int { return 0 }),
		want:   []string{"a/2", "hot/32"},
	}, {
		name:   "and elsewhere they leave room",
		shares: map[string]float64{"hot": 0.30, "a": 0.07},
		home:   home(func(b int) int { return 1 + b%3 }),
		want:   []string{"hot/32"},
	}, {
		name:   "a hot key takes twice its spread where that lands better",
		shares: map[string]float64{"hot": 0.30},
		home:   homeBy(pileAt32),
		want:   []string{"hot/64"},
	}, {
		name:     "and keeps the spread it had if it is either",
		shares:   map[string]float64{"hot": 0.30},
		home:     homeBy(pileAt32),
		previous: []fleet.HotKey{{Value: "hot", Share: 0.3, Spread: 32}},
		want:     []string{"hot/32"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSketch(time.Minute)
			traffic(tc.shares)(s)
			var got []string
			for _, e := range s.Decide(now, 4, settings(), tc.previous, tc.home) {
				got = append(got, fmt.Sprintf("%s/%d", e.Value, e.Spread))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("hot keys %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDecideKeyIndexes(t *testing.T) {
	// The same value under two keys of the chain is two keys.
	s := NewSketch(time.Minute)
	for i := range 1000 {
		s.Observe(i%2, "v", t0)
	}
	got := s.Decide(t0, 4, settings(), nil, nil)
	want := []fleet.HotKey{{Key: 0, Value: "v", Share: 0.5, Spread: 32}, {Key: 1, Value: "v", Share: 0.5, Spread: 32}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decide = %+v, want %+v", got, want)
	}
}

func TestDecideDeterministic(t *testing.T) {
	run := func() [][]fleet.HotKey {
		s := NewSketch(30 * time.Second)
		r := rand.New(rand.NewPCG(7, 7))
		var tables [][]fleet.HotKey
		var table []fleet.HotKey
		for round := range 20 {
			start := t0.Add(time.Duration(round) * 10 * time.Second)
			feed(s, start, 10*time.Second, 5000, func(int) string {
				if r.Float64() < 0.4 {
					return fmt.Sprintf("hot-%d", round/5)
				}
				return fmt.Sprintf("k%d", r.IntN(3000))
			})
			table = s.Decide(start.Add(10*time.Second), 8, settings(), table, nil)
			tables = append(tables, table)
		}
		return tables
	}
	a, b := run(), run()
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("identical observations gave different tables:\n%v\n%v", a, b)
	}
	changes := 0
	for i := 1; i < len(a); i++ {
		if !reflect.DeepEqual(a[i], a[i-1]) {
			changes++
		}
	}
	if changes == 0 {
		t.Errorf("the tables never changed: the test decides nothing")
	}
}

// TestCooling follows a key from hot to cold: it stays in the table
// while its share is above half the threshold and leaves below it.
func TestCooling(t *testing.T) {
	const healthy = 8 // threshold 1/8, leaves below 1/16
	s := NewSketch(20 * time.Second)
	var table []fleet.HotKey
	r := rand.New(rand.NewPCG(3, 4))
	now := t0
	round := func(hot float64) {
		feed(s, now, 10*time.Second, 4000, func(int) string {
			if r.Float64() < hot {
				return "sys"
			}
			return fmt.Sprintf("c%d", r.IntN(4000))
		})
		now = now.Add(10 * time.Second)
		table = s.Decide(now, healthy, settings(), table, nil)
	}
	share := func() float64 {
		est, _ := s.Shares(now, 0)
		for _, e := range est {
			if e.Value == "sys" {
				return e.Share
			}
		}
		return 0
	}
	for range 6 {
		round(0.3)
	}
	if len(table) != 1 || table[0].Value != "sys" {
		t.Fatalf("a 30%% key is not hot: %+v", table)
	}
	// The key cools to 3% of new traffic; its decayed share falls
	// through the threshold, and the key stays until below half of it.
	var left float64
	var stayedBelowEnter bool
	for i := range 30 {
		before := share()
		round(0.03)
		if len(table) == 0 {
			left = before
			break
		}
		if sh := share(); sh < 1.0/healthy {
			stayedBelowEnter = true
		}
		if i == 29 {
			t.Fatalf("the key never left: share %v", share())
		}
	}
	if !stayedBelowEnter {
		t.Errorf("the key never stayed in the table below the entry threshold")
	}
	if after := share(); after >= 1.0/(2*healthy) {
		t.Errorf("the key left at share %v, not below half the threshold %v", after, 1.0/(2*healthy))
	}
	t.Logf("left the table after a share of %.3f", left)
}

// TestFloodStaysBounded observes a million distinct keys under one hot
// one: the sketch keeps Capacity entries, its memory stays bounded, and
// the hot key is still found.
func TestFloodStaysBounded(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewSketch(time.Minute)
	const n = 1_000_000
	for i := range n {
		v := fmt.Sprintf("%016x", uint64(i)*0x9e3779b97f4a7c15)
		if i%5 == 0 {
			v = "hot"
		}
		s.Observe(0, v, t0.Add(time.Duration(i)*time.Microsecond))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := s.Len(); got != Capacity {
		t.Errorf("Len() = %d, want %d", got, Capacity)
	}
	heapBytes := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("sketch after %d distinct keys: %d entries, %d KiB of heap", n, s.Len(), heapBytes/1024)
	if heapBytes > 1<<20 {
		t.Errorf("sketch holds %d bytes after the flood, want under 1 MiB", heapBytes)
	}
	got := s.Decide(t0.Add(time.Second), 8, settings(), nil, nil)
	if len(got) != 1 || got[0].Value != "hot" || math.Abs(got[0].Share-0.2) > 0.01 {
		t.Errorf("Decide after the flood = %+v, want only hot at 0.2", got)
	}
	runtime.KeepAlive(s)
}

// ObserveN counts as many Observe calls would: the same shares, the same
// total and the same decision.
func TestObserveN(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	one, many := NewSketch(time.Minute), NewSketch(time.Minute)
	for i, n := range []uint32{5, 1, 12, 3} {
		v := fmt.Sprint("v", i%3)
		at := now.Add(time.Duration(i) * time.Second)
		for range n {
			one.Observe(0, v, at)
		}
		if !many.ObserveN(0, v, n, at) {
			t.Fatalf("ObserveN refused %s", v)
		}
	}
	at := now.Add(5 * time.Second)
	a, ta := one.Shares(at, 0)
	b, tb := many.Shares(at, 0)
	if math.Abs(ta-tb) > 1e-9 || len(a) != len(b) {
		t.Fatalf("totals %v and %v, %d and %d estimates", ta, tb, len(a), len(b))
	}
	for i := range a {
		if a[i].ID != b[i].ID || math.Abs(a[i].Share-b[i].Share) > 1e-9 {
			t.Errorf("estimate %d: %+v against %+v", i, a[i], b[i])
		}
	}
	if many.ObserveN(0, "v", 0, at) || many.ObserveN(0, "bad\x00", 2, at) {
		t.Error("ObserveN took no count, or a bad value")
	}
}
