package inflight

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type op struct {
	kind   string // start, end, close, snap
	stream uint64
	pool   string
	key    string
	host   string
	bytes  uint64
	ad     string
	at     time.Duration
	id     string   // start: the request id
	ids    []string // computed: the ids named
}

func TestTracker(t *testing.T) {
	tests := []struct {
		name   string
		ops    []op
		pool   string
		at     time.Duration
		want   map[string]uint64
		wantAd map[string][]string
		wantOK bool
		counts map[string]int
	}{
		{
			name: "starts and ends pair by key",
			ops: []op{
				{kind: "start", stream: 1, pool: "p", key: "a", host: "h1", bytes: 100},
				{kind: "start", stream: 2, pool: "p", key: "b", host: "h1", bytes: 50},
				{kind: "start", stream: 2, pool: "p", key: "c", host: "h2", bytes: 7},
				{kind: "end", stream: 1, pool: "p", key: "a"},
			},
			pool: "p", want: map[string]uint64{"h1": 50, "h2": 7}, wantOK: true,
			counts: map[string]int{Started: 3, Ended: 1},
		},
		{
			name: "an end without its start and a second start are dropped",
			ops: []op{
				{kind: "end", stream: 1, pool: "p", key: "x"},
				{kind: "start", stream: 1, pool: "p", key: "a", host: "h1", bytes: 10},
				{kind: "start", stream: 1, pool: "p", key: "a", host: "h2", bytes: 99},
			},
			pool: "p", want: map[string]uint64{"h1": 10}, wantOK: true,
			counts: map[string]int{Started: 1, Unmatched: 1, Duplicate: 1},
		},
		{
			name: "a closed stream takes its open requests, not others'",
			ops: []op{
				{kind: "start", stream: 1, pool: "p", key: "a", host: "h1", bytes: 10},
				{kind: "start", stream: 2, pool: "p", key: "b", host: "h1", bytes: 20},
				{kind: "close", stream: 1},
			},
			pool: "p", want: map[string]uint64{"h1": 20}, wantOK: true,
			counts: map[string]int{Started: 2, Closed: 1},
		},
		{
			name: "no open stream logs for the pool: no view",
			ops: []op{
				{kind: "start", stream: 1, pool: "p", key: "a", host: "h1", bytes: 10},
				{kind: "close", stream: 1},
			},
			pool: "p", want: map[string]uint64{}, wantOK: false,
			counts: map[string]int{Started: 1, Closed: 1},
		},
		{
			name: "requests open past MaxAge are forgotten",
			ops: []op{
				{kind: "start", stream: 1, pool: "p", key: "old", host: "h1", bytes: 10},
				{kind: "start", stream: 1, pool: "p", key: "new", host: "h1", bytes: 5, at: MaxAge},
			},
			pool: "p", at: MaxAge + time.Second, want: map[string]uint64{"h1": 5}, wantOK: true,
			counts: map[string]int{Started: 2, Expired: 1},
		},
		{
			name: "adapters in flight by host, each until its last request ends",
			ops: []op{
				{kind: "start", stream: 1, pool: "p", key: "a", host: "h1", bytes: 10, ad: "sql"},
				{kind: "start", stream: 2, pool: "p", key: "b", host: "h1", bytes: 10, ad: "sql"},
				{kind: "start", stream: 1, pool: "p", key: "c", host: "h1", bytes: 10, ad: "chat"},
				{kind: "start", stream: 1, pool: "p", key: "d", host: "h2", bytes: 10, ad: "chat"},
				{kind: "start", stream: 1, pool: "p", key: "e", host: "h2", bytes: 10},
				{kind: "start", stream: 1, pool: "p", key: "f", host: "h3", bytes: 10, ad: "law"},
				{kind: "end", stream: 1, pool: "p", key: "a"},
				{kind: "end", stream: 1, pool: "p", key: "d"},
				{kind: "close", stream: 1},
			},
			pool: "p", want: map[string]uint64{"h1": 10}, wantAd: map[string][]string{"h1": {"sql"}}, wantOK: true,
			counts: map[string]int{Started: 6, Ended: 2, Closed: 3},
		},
		{
			name: "a computed request stops counting its bytes once, keeps its adapter until its end",
			ops: []op{
				{kind: "start", stream: 1, pool: "p", key: "r1/1", id: "r1", host: "h1", bytes: 100, ad: "sql"},
				// A retry of r1, and another request.
				{kind: "start", stream: 1, pool: "p", key: "r1/2", id: "r1", host: "h1", bytes: 100},
				{kind: "start", stream: 1, pool: "p", key: "r2", id: "r2", host: "h1", bytes: 40},
				// Another stream's request of the same id is not its to name.
				{kind: "start", stream: 2, pool: "p", key: "r1/x", id: "r1", host: "h3", bytes: 7},
				{kind: "computed", stream: 1, pool: "p", ids: []string{"r1", "unknown", ""}},
				{kind: "computed", stream: 1, pool: "p", ids: []string{"r1"}},
				{kind: "end", stream: 1, pool: "p", key: "r1/2"},
				// Another pool's ids are apart.
				{kind: "computed", stream: 1, pool: "q", ids: []string{"r2"}},
			},
			pool: "p", want: map[string]uint64{"h1": 40, "h3": 7}, wantAd: map[string][]string{"h1": {"sql"}}, wantOK: true,
			counts: map[string]int{Started: 4, Computed: 2, Ended: 1},
		},
		{
			name: "pools are apart",
			ops: []op{
				{kind: "start", stream: 1, pool: "p", key: "a", host: "h1", bytes: 10},
				{kind: "start", stream: 1, pool: "q", key: "a", host: "h1", bytes: 30},
			},
			pool: "q", want: map[string]uint64{"h1": 30}, wantOK: true,
			counts: map[string]int{Started: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counts := map[string]int{}
			tr := New(func(r string, n int) { counts[r] += n })
			for _, o := range tt.ops {
				switch o.kind {
				case "start":
					tr.Start(o.stream, o.pool, o.key, Attempt{Host: o.host, Bytes: o.bytes, Adapter: o.ad, ID: o.id, At: t0.Add(o.at)})
				case "computed":
					tr.Computed(o.stream, o.pool, o.ids)
				case "end":
					tr.End(o.stream, o.pool, o.key)
				case "close":
					tr.CloseStream(o.stream)
				}
			}
			l, ok := tr.Snapshot(tt.pool, t0.Add(tt.at))
			got := l.Bytes
			if got == nil {
				got = map[string]uint64{}
			}
			if !maps.Equal(got, tt.want) || ok != tt.wantOK {
				t.Errorf("Snapshot = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
			if !maps.EqualFunc(l.Adapters, tt.wantAd, slices.Equal) {
				t.Errorf("Snapshot's adapters = %v, want %v", l.Adapters, tt.wantAd)
			}
			if !maps.Equal(counts, tt.counts) {
				t.Errorf("counts = %v, want %v", counts, tt.counts)
			}
		})
	}
}

// TestForget: a pool that no longer observes load keeps nothing.
func TestForget(t *testing.T) {
	tr := New(nil)
	tr.Start(1, "p", "a", Attempt{Host: "h1", Bytes: 10, Adapter: "sql", At: t0})
	tr.Start(1, "q", "a", Attempt{Host: "h1", Bytes: 20, At: t0})
	tr.Forget("p")
	if got, ok := tr.Snapshot("p", t0); len(got.Bytes) != 0 || len(got.Adapters) != 0 || ok {
		t.Errorf("forgotten pool: %v, %v", got, ok)
	}
	if got, ok := tr.Snapshot("q", t0); got.Bytes["h1"] != 20 || !ok {
		t.Errorf("other pool: %v, %v", got, ok)
	}
}

// TestFloodStaysBounded: starts without ends stop being kept at MaxOpen
// per pool, and are counted.
func TestFloodStaysBounded(t *testing.T) {
	counts := map[string]int{}
	tr := New(func(r string, n int) { counts[r] += n })
	for i := range MaxOpen + 100 {
		tr.Start(1, "p", string(rune(i))+"#"+time.Duration(i).String(), Attempt{Host: "h1", Bytes: 1, At: t0})
	}
	got, _ := tr.Snapshot("p", t0)
	if got.Bytes["h1"] != MaxOpen || counts[Full] != 100 {
		t.Errorf("h1 = %d (want %d), pool_full = %d (want 100)", got.Bytes["h1"], MaxOpen, counts[Full])
	}
}

// TestWent: a key's request sent away from its slot's replica is
// remembered there, one sent home forgets it; the latest wins, entries
// expire after WentTTL, the oldest quarter goes past MaxWent, and Add
// keeps each key's latest across instances.
func TestWent(t *testing.T) {
	start := func(tr *Tracker, id, key, host string, away bool, at time.Duration) {
		tr.Start(1, "p", id, Attempt{Host: host, Bytes: 1, Key: key, Away: away, At: t0.Add(at)})
	}
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	tests := []struct {
		name string
		run  func(tr *Tracker)
		at   time.Duration
		want map[string]Went
	}{
		{"away, then away elsewhere: the latest", func(tr *Tracker) {
			start(tr, "1", "0000000a", "h1", true, 0)
			start(tr, "2", "0000000a", "h2", true, time.Second)
			start(tr, "3", "0000000b", "h1", true, time.Second)
		}, time.Second, map[string]Went{"0000000a": {"h2", ms(time.Second)}, "0000000b": {"h1", ms(time.Second)}}},
		{"home leaves a tombstone", func(tr *Tracker) {
			start(tr, "1", "0000000a", "h1", true, 0)
			start(tr, "2", "0000000a", "h2", false, time.Second)
		}, time.Second, map[string]Went{"0000000a": {"", ms(time.Second)}}},
		{"a tombstone stays as it was", func(tr *Tracker) {
			start(tr, "1", "0000000a", "h1", true, 0)
			start(tr, "2", "0000000a", "h2", false, time.Second)
			start(tr, "3", "0000000a", "h2", false, 2*time.Second)
		}, 2 * time.Second, map[string]Went{"0000000a": {"", ms(time.Second)}}},
		{"home of a key another instance sent away", func(tr *Tracker) {
			tr.SetServed("p", map[string]Went{"0000000c": {"h3", ms(0)}, "0000000d": {"", ms(0)}})
			start(tr, "1", "0000000c", "h2", false, time.Second)
			start(tr, "2", "0000000d", "h2", false, time.Second)
		}, time.Second, map[string]Went{"0000000c": {"", ms(time.Second)}}},
		{"keyless requests and other keys are kept apart", func(tr *Tracker) {
			start(tr, "1", "0000000a", "h1", true, 0)
			start(tr, "2", "", "h2", true, 0)
			start(tr, "3", "0000000b", "h2", false, 0)
		}, 0, map[string]Went{"0000000a": {"h1", ms(0)}}},
		{"expired after WentTTL", func(tr *Tracker) {
			start(tr, "1", "0000000a", "h1", true, 0)
			start(tr, "2", "0000000b", "h1", true, time.Minute)
		}, WentTTL + time.Second, map[string]Went{"0000000b": {"h1", ms(time.Minute)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(nil)
			tc.run(tr)
			l, _ := tr.Snapshot("p", t0.Add(tc.at))
			if !maps.Equal(l.Went, tc.want) {
				t.Errorf("went %v, want %v", l.Went, tc.want)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		tr := New(nil)
		for i := range MaxWent + 1 {
			start(tr, string(rune(i)), fmt.Sprintf("%08x", i), "h1", true, time.Duration(i)*time.Millisecond)
		}
		l, _ := tr.Snapshot("p", t0.Add(time.Second))
		if want := MaxWent - MaxWent/4 + 1; len(l.Went) != want {
			t.Fatalf("%d keys kept, want %d", len(l.Went), want)
		}
		if _, ok := l.Went[fmt.Sprintf("%08x", MaxWent/4-1)]; ok {
			t.Error("an oldest key is kept")
		}
		if _, ok := l.Went[fmt.Sprintf("%08x", MaxWent)]; !ok {
			t.Error("the newest key is not kept")
		}
	})
	t.Run("add", func(t *testing.T) {
		// "0000000d" went away through one instance's Envoys, then home
		// through another's: its tombstone is the latest.
		a := Load{Went: map[string]Went{"0000000a": {"h1", 5}, "0000000b": {"h1", 9}, "0000000c": {"h2", 7}, "0000000d": {"h1", 5}}}
		b := Load{Went: map[string]Went{"0000000a": {"h2", 6}, "0000000b": {"h2", 8}, "0000000c": {"h1", 7}, "0000000d": {"", 6}}}
		want := map[string]Went{"0000000a": {"h2", 6}, "0000000b": {"h1", 9}, "0000000c": {"h1", 7}, "0000000d": {"", 6}}
		for _, got := range []Load{a.Add(b), b.Add(a)} {
			if !maps.Equal(got.Went, want) {
				t.Errorf("added %v, want %v", got.Went, want)
			}
		}
		if len(a.Went) != 4 || a.Went["0000000a"].Host != "h1" {
			t.Errorf("Add changed its receiver: %v", a.Went)
		}
	})
}

func TestWentKey(t *testing.T) {
	for s, want := range map[string]bool{"0123abcd": true, "0123ABCD": false, "0123abc": false, "0123abcde": false, "0123abcg": false, "": false} {
		if got := WentKey(s); got != want {
			t.Errorf("WentKey(%q) = %v, want %v", s, got, want)
		}
	}
}

// seenBits lists the bits set in a SeenSet string.
func seenBits(t *testing.T, s string) []uint16 {
	t.Helper()
	if !ValidSeen(s) {
		t.Fatalf("set %.20q... is not valid", s)
	}
	var out []uint16
	for i := range len(s) * 4 {
		if hexVal(s[i/4])&(8>>(i%4)) != 0 {
			out = append(out, uint16(i))
		}
	}
	return out
}

func TestSeen(t *testing.T) {
	start := func(tr *Tracker, id, key string, away bool, at time.Duration) {
		tr.Start(1, "p", id, Attempt{Host: "h1", Bytes: 1, Key: key, Away: away, At: t0.Add(at)})
	}
	tests := []struct {
		name string
		run  func(tr *Tracker)
		at   time.Duration
		want []uint16
	}{
		{"none", func(tr *Tracker) { start(tr, "1", "", false, 0) }, 0, nil},
		{"home and away alike, by the first four digits", func(tr *Tracker) {
			start(tr, "1", "0001ffff", false, 0)
			start(tr, "2", "ffff0000", true, 0)
			start(tr, "3", "0001aaaa", true, 0)
		}, 0, []uint16{1, 0xffff}},
		{"forgotten after WentTTL since its key's last request", func(tr *Tracker) {
			start(tr, "1", "00020000", false, 0)
			start(tr, "2", "00030000", false, 0)
			start(tr, "3", "00030000", false, time.Minute)
		}, WentTTL + time.Second, []uint16{3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(nil)
			tc.run(tr)
			l, _ := tr.Snapshot("p", t0.Add(tc.at))
			if got := seenBits(t, l.Seen); !slices.Equal(got, tc.want) {
				t.Errorf("seen %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("add", func(t *testing.T) {
		a, b := SeenSet([]uint16{0, 5, 700}), SeenSet([]uint16{5, 65535})
		for _, got := range []Load{(Load{Seen: a}).Add(Load{Seen: b}), (Load{Seen: b}).Add(Load{Seen: a})} {
			if bits := seenBits(t, got.Seen); !slices.Equal(bits, []uint16{0, 5, 700, 65535}) {
				t.Errorf("added %v", bits)
			}
		}
		if n := SeenCount(OrSeen(a, b)); n != 4 {
			t.Errorf("SeenCount = %d, want 4", n)
		}
		for _, tc := range [][3]string{{a, "", a}, {"", a, a}, {"zz", a, a}, {a, "zz", a}, {"", "", ""}, {"zz", "", ""}} {
			if got := OrSeen(tc[0], tc[1]); got != tc[2] {
				t.Errorf("OrSeen(%.8q, %.8q) = %.8q, want %.8q", tc[0], tc[1], got, tc[2])
			}
		}
	})
}

func TestSeenBit(t *testing.T) {
	for k, want := range map[string]int{"0123abcd": 0x0123, "ffff0000": 0xffff, "0000ffff": 0, "FFFF0000": -1, "0123": -1} {
		b, ok := SeenBit(k)
		if got := int(b); !ok {
			got = -1
		} else if got != want {
			t.Errorf("SeenBit(%q) = %d, want %d", k, got, want)
		}
		if ok != (want >= 0) {
			t.Errorf("SeenBit(%q) ok = %v", k, ok)
		}
	}
}
