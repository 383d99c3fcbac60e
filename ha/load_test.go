package ha

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvxds/kvxds/inflight"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestLoadExchange: two instances report to a third over HTTP. Each
// ends with the fleet's sum: its own figures plus the others', bytes
// summed and adapters joined, never its own twice; figures expire after
// LoadTTL of their sender's intervals, and a leader's answer goes when
// the follower stops reporting to it.
func TestLoadExchange(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	leader := NewLoadExchange("a", clk.now)
	srv := httptest.NewServer(leader)
	defer srv.Close()
	b := NewLoadExchange("b", clk.now)
	c := NewLoadExchange("c", clk.now)
	for _, x := range []*LoadExchange{leader, b, c} {
		x.SetPools(map[string]time.Duration{"docs": time.Second, "chat": 500 * time.Millisecond})
	}
	const h1, h2 = "10.0.0.1:8000", "10.0.0.2:8000"
	leader.SetOwn("docs", inflight.Load{Bytes: map[string]uint64{h1: 100}, Adapters: map[string][]string{h1: {"sql"}}}, true)
	b.SetOwn("docs", inflight.Load{Bytes: map[string]uint64{h1: 20, h2: 5}, Adapters: map[string][]string{h1: {"chat", "sql"}}}, true)
	c.SetOwn("docs", inflight.Load{Bytes: map[string]uint64{h2: 7}}, true)
	c.SetOwn("chat", inflight.Load{Bytes: map[string]uint64{h1: 1}}, true)

	ctx := context.Background()
	for _, x := range []*LoadExchange{b, c, b} { // b again: it now hears of c
		if err := x.Report(ctx, srv.Client(), srv.URL); err != nil {
			t.Fatal(err)
		}
	}
	want := func(x *LoadExchange, pool string, bytes map[string]uint64, adapters map[string][]string) {
		t.Helper()
		got, ok := x.Peers(pool)
		if !ok {
			t.Fatalf("%s: no peers' figures for %s", x.id, pool)
		}
		if !reflect.DeepEqual(got.Bytes, bytes) || !reflect.DeepEqual(got.Adapters, adapters) {
			t.Fatalf("%s: peers' figures for %s = %v %v; want %v %v", x.id, pool, got.Bytes, got.Adapters, bytes, adapters)
		}
	}
	// The leader adds b's and c's; b hears of a's and c's; c, which
	// reported before b's second report, of a's and b's first.
	want(leader, "docs", map[string]uint64{h1: 20, h2: 12}, map[string][]string{h1: {"chat", "sql"}})
	want(b, "docs", map[string]uint64{h1: 100, h2: 7}, map[string][]string{h1: {"sql"}})
	want(b, "chat", map[string]uint64{h1: 1}, nil)
	want(c, "docs", map[string]uint64{h1: 120, h2: 5}, map[string][]string{h1: {"chat", "sql"}})
	if n := leader.Reporters(); n != 2 {
		t.Fatalf("leader: %d reporters, want 2", n)
	}
	if n := b.Reporters(); n != 0 {
		t.Fatalf("b: %d reporters, want 0 (an answer is no reporter)", n)
	}

	// c stops reporting: its figures count for five of its intervals
	// (half a second each: it reports for chat too).
	clk.add(2 * time.Second)
	if err := b.Report(ctx, srv.Client(), srv.URL); err != nil {
		t.Fatal(err)
	}
	want(leader, "docs", map[string]uint64{h1: 20, h2: 12}, map[string][]string{h1: {"chat", "sql"}})
	clk.add(600 * time.Millisecond)
	want(leader, "docs", map[string]uint64{h1: 20, h2: 5}, map[string][]string{h1: {"chat", "sql"}})
	if err := b.Report(ctx, srv.Client(), srv.URL); err != nil {
		t.Fatal(err)
	}
	want(b, "docs", map[string]uint64{h1: 100}, map[string][]string{h1: {"sql"}})
	if _, ok := b.Peers("chat"); ok {
		t.Fatal("b still counts c's chat figures")
	}
	// The leader's answer lasts five of its intervals, then b serves
	// its own alone; or it goes at once when b stops reporting there.
	clk.add(5 * time.Second)
	if _, ok := b.Peers("docs"); ok {
		t.Fatal("b kept an expired answer")
	}
	if err := b.Report(ctx, srv.Client(), srv.URL); err != nil {
		t.Fatal(err)
	}
	b.DropUpstream()
	if _, ok := b.Peers("docs"); ok {
		t.Fatal("b kept the answer it dropped")
	}
	// A pool b no longer observes is no longer reported.
	b.SetPools(map[string]time.Duration{"chat": time.Second})
	if err := b.Report(ctx, srv.Client(), srv.URL); err != nil {
		t.Fatal(err)
	}
	if _, ok := leader.Peers("docs"); ok {
		t.Fatal("the leader counts b's figures of a pool b dropped")
	}
}

// TestLoadExchangeRefuses: what an instance does with bad reports. None
// changes what it serves.
func TestLoadExchangeRefuses(t *testing.T) {
	x := NewLoadExchange("a", nil)
	srv := httptest.NewServer(x)
	defer srv.Close()
	post := func(body string) int {
		t.Helper()
		resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	manyAdapters := `{"instance":"b","interval_ms":1000,"pools":{"docs":{"adapters":{"h":[` +
		strings.TrimSuffix(strings.Repeat(`"x",`, MaxLoadAdapters+1), ",") + `]}}}}`
	var pools []string
	for i := range MaxLoadPools + 1 {
		pools = append(pools, fmt.Sprintf(`"p%d":{}`, i))
	}
	manyPools := `{"instance":"b","interval_ms":1000,"pools":{` + strings.Join(pools, ",") + `}}`
	var went []string
	for i := range inflight.MaxWent + 1 {
		went = append(went, fmt.Sprintf(`"%08x":{"host":"h","at":1}`, i))
	}
	manyWent := `{"instance":"b","interval_ms":1000,"pools":{"docs":{"went":{` + strings.Join(went, ",") + `}}}}`
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"not json", "{", http.StatusBadRequest},
		{"no instance", `{"interval_ms":1000}`, http.StatusBadRequest},
		{"negative bytes", `{"instance":"b","pools":{"docs":{"bytes":{"h":-1}}}}`, http.StatusBadRequest},
		{"too many adapters", manyAdapters, http.StatusBadRequest},
		{"too many pools", manyPools, http.StatusBadRequest},
		{"a key sent away that is no key hash", `{"instance":"b","interval_ms":1000,"pools":{"docs":{"went":{"<script>":{"host":"h","at":1}}}}}`, http.StatusBadRequest},
		{"too many keys sent away", manyWent, http.StatusBadRequest},
		{"keys placed of the wrong size", `{"instance":"b","interval_ms":1000,"pools":{"docs":{"seen":"8000"}}}`, http.StatusBadRequest},
		{"too large", `{"instance":"` + strings.Repeat("b", MaxLoadReportBytes) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		if got := post(tc.body); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	if _, ok := x.Peers("docs"); ok || x.Reporters() != 0 {
		t.Fatal("a refused report counts")
	}
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	// At most MaxLoadReporters instances count; a known one still may
	// report, a new one waits until one expires.
	for i := range MaxLoadReporters {
		if got := post(fmt.Sprintf(`{"instance":"i%d","interval_ms":1000}`, i)); got != http.StatusOK {
			t.Fatalf("reporter %d: %d", i, got)
		}
	}
	if got := post(`{"instance":"late","interval_ms":1000}`); got != http.StatusTooManyRequests {
		t.Fatalf("reporter beyond the bound: %d", got)
	}
	if got := post(`{"instance":"i0","interval_ms":1000}`); got != http.StatusOK {
		t.Fatalf("a known reporter: %d", got)
	}
	// An answer that is not one is an error, and no figures.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "<html>") }))
	defer bad.Close()
	y := NewLoadExchange("b", nil)
	if err := y.Report(context.Background(), bad.Client(), bad.URL); err == nil {
		t.Fatal("Report accepted a page that is no answer")
	}
	if _, ok := y.Peers("docs"); ok {
		t.Fatal("a bad answer counts")
	}
}

// TestLoadExchangeForwards: the requests a follower's Envoys log go, by
// key value, to the instance it reports to with its next report, at most
// MaxObservations values a report; a report without figures carries
// them too, and bad ones are refused.
func TestLoadExchangeForwards(t *testing.T) {
	leader := NewLoadExchange("a", nil)
	var got []Observation
	leader.OnObserved(func(obs []Observation) { got = append(got, obs...) })
	srv := httptest.NewServer(leader)
	defer srv.Close()
	b := NewLoadExchange("b", nil)
	for range 3 {
		b.Forward("chat", ObservedHotKeys, 0, "acme")
	}
	b.Forward("chat", ObservedHotKeys, 1, "acme")
	b.Forward("lora", ObservedAdapters, 0, "sql")
	if !b.Waiting() {
		t.Fatal("Waiting: false with observations waiting")
	}
	if err := b.Report(context.Background(), srv.Client(), srv.URL); err != nil {
		t.Fatal(err)
	}
	want := []Observation{
		{Pool: "chat", Kind: ObservedHotKeys, Key: 0, Value: "acme", N: 3},
		{Pool: "chat", Kind: ObservedHotKeys, Key: 1, Value: "acme", N: 1},
		{Pool: "lora", Kind: ObservedAdapters, Key: 0, Value: "sql", N: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("absorbed %+v, want %+v", got, want)
	}
	if b.Waiting() {
		t.Fatal("the outbox kept what was sent")
	}
	// A flood of distinct values: the outbox stays bounded.
	for i := range MaxObservations + 10 {
		b.Forward("chat", ObservedHotKeys, 0, fmt.Sprint("v", i))
	}
	b.Forward("chat", ObservedHotKeys, 0, "v0") // known: counted
	if d := b.DroppedObservations(); d != 10 {
		t.Fatalf("dropped %d, want 10", d)
	}
	got = nil
	if err := b.Report(context.Background(), srv.Client(), srv.URL); err != nil {
		t.Fatal(err)
	}
	if len(got) != MaxObservations || got[0].Value != "v0" || got[0].N != 2 {
		t.Fatalf("absorbed %d observations, the first %+v", len(got), got[0])
	}
	// Reporting elsewhere, or leading, drops what waits.
	b.Forward("chat", ObservedHotKeys, 0, "acme")
	b.DropUpstream()
	if b.Waiting() {
		t.Fatal("DropUpstream kept the observations waiting")
	}
	// Bad observations refuse the report, and nothing is absorbed.
	got = nil
	for _, o := range []Observation{
		{Pool: "chat", Kind: "other", Value: "x", N: 1},
		{Pool: "chat", Kind: ObservedHotKeys, Key: -1, Value: "x", N: 1},
		{Pool: "chat", Kind: ObservedHotKeys, Value: "", N: 1},
		{Pool: "chat", Kind: ObservedHotKeys, Value: "x", N: 0},
		{Kind: ObservedHotKeys, Value: "x", N: 1},
	} {
		if _, err := leader.take(LoadReport{Instance: "b", IntervalMS: 1000, Observed: []Observation{o}}); err == nil {
			t.Errorf("took %+v", o)
		}
	}
	if got != nil {
		t.Fatalf("absorbed %+v from refused reports", got)
	}
}
