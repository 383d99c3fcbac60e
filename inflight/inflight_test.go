package inflight

import (
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
