package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestIndexRouter(t *testing.T) {
	doc := strings.Repeat("d", 100)
	for _, tc := range []struct {
		name string
		cfg  IndexConfig
		// served[i] is a prompt replica i served before (in order).
		served []string
		// inflight adds requests in flight per replica before the pick.
		inflight []int
		prompt   string
		want     int
	}{
		{name: "longest match wins", cfg: DefaultIndexConfig(),
			served: []string{"sys A: hello there", "sys A: hello world, how", "sys B"},
			prompt: "sys A: hello world, how are you", want: 1},
		{name: "match within an edge counts", cfg: DefaultIndexConfig(),
			served: []string{"xyz", doc + "first question"},
			prompt: doc + "second question", want: 1},
		{name: "match at the threshold goes to the smallest tree", cfg: IndexConfig{CacheThreshold: 0.5, BalanceAbs: 64, BalanceRel: 1.5},
			served: []string{"aaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb", "c"},
			prompt: "bbbbbbbbbbcccccccccc", want: 2},
		{name: "match above the threshold keeps the replica", cfg: IndexConfig{CacheThreshold: 0.5, BalanceAbs: 64, BalanceRel: 1.5},
			served: []string{"aaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb", "c"},
			prompt: "bbbbbbbbbbbccccccccc", want: 1},
		{name: "empty tree goes to the smallest (first) replica", cfg: DefaultIndexConfig(),
			prompt: "anything", want: 0},
		{name: "imbalance overrides the match", cfg: IndexConfig{CacheThreshold: 0.3, BalanceAbs: 2, BalanceRel: 1.5},
			served: []string{"hello world", "other", "more"}, inflight: []int{4, 2, 1},
			prompt: "hello world again", want: 2},
		{name: "load within the absolute threshold keeps the match", cfg: IndexConfig{CacheThreshold: 0.3, BalanceAbs: 3, BalanceRel: 1.5},
			served: []string{"hello world", "other", "more"}, inflight: []int{4, 2, 1},
			prompt: "hello world again", want: 0},
		{name: "load within the relative threshold keeps the match", cfg: IndexConfig{CacheThreshold: 0.3, BalanceAbs: 2, BalanceRel: 2},
			served: []string{"hello world", "other", "more"}, inflight: []int{8, 5, 4},
			prompt: "hello world again", want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := max(len(tc.served), len(tc.inflight), 1)
			x := NewIndexRouter(n, tc.cfg)
			for i, p := range tc.served {
				x.insert(p, i)
			}
			for i, l := range tc.inflight {
				x.load[i] = l
			}
			if got := x.Pick(tc.prompt); got != tc.want {
				t.Errorf("Pick = %d, want %d (sizes %v)", got, tc.want, x.size)
			}
		})
	}
}

// A conversation stays where it started as it grows, a new one goes to the
// replica with the least text, and Done releases the load.
func TestIndexRouterConversations(t *testing.T) {
	x := NewIndexRouter(2, DefaultIndexConfig())
	a := "system: be brief. user: first"
	if got := x.Pick(a); got != 0 {
		t.Fatalf("first pick %d", got)
	}
	if got := x.Pick("unrelated prompt"); got != 1 {
		t.Fatalf("second conversation went to %d, want the empty replica 1", got)
	}
	for turn := range 5 {
		a += " reply. user: more"
		if got := x.Pick(a); got != 0 {
			t.Fatalf("turn %d went to %d", turn, got)
		}
	}
	if x.load[0] != 6 || x.load[1] != 1 {
		t.Errorf("loads %v", x.load)
	}
	for range 6 {
		x.Done(0)
	}
	x.Done(1)
	if x.load[0] != 0 || x.load[1] != 0 {
		t.Errorf("loads after Done %v", x.load)
	}
}

// Above MaxTreeSize a replica's least recently used leaves go; the tree
// text another replica shares stays.
func TestIndexRouterEviction(t *testing.T) {
	x := NewIndexRouter(2, IndexConfig{MaxTreeSize: 12})
	x.tick = 1
	x.insert("shared-old-x", 0)
	x.insert("shared-old-x", 1)
	x.tick = 2
	x.insert("shared-new", 0)
	x.evict(0)
	if x.size[0] > 12 {
		t.Fatalf("size %d after eviction", x.size[0])
	}
	if m, who := x.match("shared-old-x"); m != 12 || who != 1 {
		t.Errorf("match after eviction = %d on %d, want 12 on 1", m, who)
	}
	if m, who := x.match("shared-new"); m != 10 || who != 0 {
		t.Errorf("recent text = %d on %d, want 10 on 0", m, who)
	}
}

// The index mode runs end to end on stateless chat: no failures, and it
// beats round robin's hit rate.
func TestEndToEndIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end benchmark run; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{
		Workloads: []string{"chat-stateless"},
		Replicas:  4,
		Load:      0.5,
		Duration:  12 * time.Second,
		TimeScale: 3,
		Modes:     []Mode{RoundRobin, Index},
		Out:       t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	wr := rep.Workloads[0]
	rr, _ := wr.Mode(RoundRobin)
	ix, ok := wr.Mode(Index)
	if !ok {
		t.Fatal("no index result")
	}
	t.Logf("%d requests; hit rate round_robin %.3f, index %.3f; TTFT p95 %.3fs vs %.3fs",
		wr.Requests, rr.HitRate, ix.HitRate, rr.ClientTTFT.P95, ix.ClientTTFT.P95)
	if ix.Failed != 0 || ix.QueryToks <= 0 {
		t.Errorf("index: %d failed, %.0f query tokens", ix.Failed, ix.QueryToks)
	}
	if !(ix.HitRate > rr.HitRate) {
		t.Errorf("index hit rate %.3f does not exceed round robin's %.3f", ix.HitRate, rr.HitRate)
	}
}
