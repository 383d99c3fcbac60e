package reconcile

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/inflight"
	"github.com/kvxds/kvxds/xds/accesslog"
)

// loadFleet is one pool bounding prompt bytes on its Envoys' load, over
// two replicas.
func loadFleet() fleet.Fleet {
	return fleet.Fleet{Pools: []fleet.Pool{{
		Name: "docs",
		Settings: fleet.Settings{Port: 10000, Balancer: fleet.ConsistentHash, Hash: fleet.Hash{
			Algorithm: fleet.RingHash, BalanceFactor: 150, BalanceOn: fleet.BalanceOnPromptBytes,
			LoadInterval: time.Second, Keys: []fleet.HashKey{{Header: "x-session-id"}}, Keyless: fleet.RoundRobin,
		}},
		Endpoints: []fleet.Endpoint{
			{Host: "10.0.0.1", Port: 8000, Weight: 1, Health: fleet.Healthy},
			{Host: "10.0.0.2", Port: 8000, Weight: 1, Health: fleet.Healthy},
		},
	}}}
}

// TestLoadDecide: a pool's figures are taken every load interval and
// served when they change, refreshed after five intervals unchanged, and
// dropped when no stream logs for the pool; WithLoad puts them on the
// replicas.
func TestLoadDecide(t *testing.T) {
	l := newLoadState(prometheus.NewRegistry(), nil)
	f := loadFleet()
	l.update(f)
	sink := loadSink{l}
	if ll, ok := sink.LoadPool("docs"); !ok || ll != (accesslog.LoadLog{Pool: "docs"}) {
		t.Fatalf("LoadPool(docs) = %+v, %v; want the pool's own, no adapter header", ll, ok)
	}
	if _, ok := sink.LoadPool("chat"); ok {
		t.Fatal("LoadPool: want docs only")
	}
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	step := func(at time.Duration, wantChanged bool) {
		t.Helper()
		changed, next := l.decide(t0.Add(at))
		if changed != wantChanged || next <= 0 || next > time.Second {
			t.Fatalf("at %s: decide = %v, %s; want changed %v, next within the interval", at, changed, next, wantChanged)
		}
	}
	step(0, false) // no stream yet: no view
	sink.Start(1, "docs", "r1", inflight.Attempt{Host: "10.0.0.1:8000", Bytes: 5000, Key: "0123abcd", At: t0})
	step(500*time.Millisecond, false) // not due
	step(time.Second, true)
	got := WithLoad(loadFleet(), l.current()).Pools[0]
	if !got.LoadAt.Equal(t0.Add(time.Second)) || got.Endpoints[0].InFlightBytes != 5000 || got.Endpoints[1].InFlightBytes != 0 {
		t.Fatalf("WithLoad: load at %s, bytes %d and %d", got.LoadAt, got.Endpoints[0].InFlightBytes, got.Endpoints[1].InFlightBytes)
	}
	// The key placed rides in the table, and is counted.
	if got.Seen != inflight.SeenSet([]uint16{0x0123}) {
		t.Fatalf("WithLoad: keys placed %.12q..., want key 0123abcd's bit", got.Seen)
	}
	if n := testutil.ToFloat64(l.placed.WithLabelValues("docs")); n != 1 {
		t.Fatalf("kvxds_load_keys_placed = %v, want 1", n)
	}
	step(2*time.Second, false) // unchanged
	step(6*time.Second, true)  // refreshed: five intervals old
	sink.End(1, "docs", "r1")
	step(7*time.Second, true)
	if b := l.current()["docs"].Bytes; len(b) != 0 {
		t.Fatalf("after the end: %v", b)
	}
	step(20*time.Second, true) // no bytes, but the key placed keeps the table believed
	step(21*time.Second, false)
	sink.CloseStream(1)
	step(22*time.Second, true) // no view: the table carries no load
	if _, ok := l.current()["docs"]; ok {
		t.Fatal("a pool without log streams kept its figures")
	}
	if n := testutil.CollectAndCount(l.placed); n != 0 {
		t.Fatalf("a pool without log streams still counts keys placed (%d series)", n)
	}
	if got := WithLoad(loadFleet(), l.current()).Pools[0]; !got.LoadAt.IsZero() {
		t.Fatal("WithLoad without figures set LoadAt")
	}
}

// TestLoadAdapters: in a pool placing adapters, the adapters in flight
// are figures of their own: a change of them alone is served, and
// WithLoad puts them on their replicas.
func TestLoadAdapters(t *testing.T) {
	lora := func() fleet.Fleet {
		f := loadFleet()
		a := fleet.DefaultAdapters()
		f.Pools[0].LoRA = &a
		return f
	}
	l := newLoadState(prometheus.NewRegistry(), nil)
	l.update(lora())
	sink := loadSink{l}
	if ll, ok := sink.LoadPool("docs"); !ok || ll.AdapterHeader != fleet.DefaultAdapterHeader {
		t.Fatalf("LoadPool(docs) = %+v, %v; want adapter header %q", ll, ok, fleet.DefaultAdapterHeader)
	}
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	sink.Start(1, "docs", "r1", inflight.Attempt{Host: "10.0.0.1:8000", Bytes: 100, Adapter: "sql", At: t0})
	if changed, _ := l.decide(t0); !changed {
		t.Fatal("first figures not served")
	}
	// Same bytes, one more adapter.
	sink.Start(1, "docs", "r2", inflight.Attempt{Host: "10.0.0.1:8000", Adapter: "law", At: t0})
	if changed, _ := l.decide(t0.Add(time.Second)); !changed {
		t.Fatal("a new adapter in flight was not served")
	}
	got := WithLoad(lora(), l.current()).Pools[0]
	if a, b := got.Endpoints[0].InFlightAdapters, got.Endpoints[1].InFlightAdapters; a != "law sql" || b != "" {
		t.Fatalf("WithLoad: adapters %q and %q, want \"law sql\" and none", a, b)
	}
	sink.End(1, "docs", "r1")
	if changed, _ := l.decide(t0.Add(2 * time.Second)); !changed {
		t.Fatal("an adapter's last request ending was not served")
	}
	if got := WithLoad(lora(), l.current()).Pools[0]; got.Endpoints[0].InFlightAdapters != "law" {
		t.Fatalf("after sql's end: %q", got.Endpoints[0].InFlightAdapters)
	}
	// No bytes left in flight, one adapter: refreshed after five
	// intervals unchanged, so that the filters keep believing it.
	if changed, _ := l.decide(t0.Add(3 * time.Second)); changed {
		t.Fatal("unchanged figures served again before five intervals")
	}
	if changed, _ := l.decide(t0.Add(7 * time.Second)); !changed {
		t.Fatal("an adapter in flight alone was not refreshed")
	}
}

// TestLoadPrefill: a decode pool whose prefill pool bounds prompt bytes
// with a load interval logs its requests as load on the prefill replicas
// its header names; the prefill pool's figures, counted until the
// decode replica's response starts, reach the decode pool's table.
func TestLoadPrefill(t *testing.T) {
	pf := loadFleet().Pools[0]
	pf.Name = "docs-prefill"
	decode := fleet.Pool{
		Name:      "docs",
		Settings:  fleet.Settings{Port: 10001, Balancer: fleet.LeastRequest, Prefill: &fleet.Prefill{Pool: "docs-prefill", Header: fleet.DefaultPrefillHeader}},
		Endpoints: []fleet.Endpoint{{Host: "10.0.1.1", Port: 8000, Weight: 1, Health: fleet.Healthy}},
	}
	joined := fleet.Fleet{Pools: []fleet.Pool{decode, pf}}
	prepare := func(f fleet.Fleet) fleet.Fleet {
		t.Helper()
		m, err := fleet.Prepare(f)
		if err != nil {
			t.Fatal(err)
		}
		return m.Fleet()
	}
	l := newLoadState(prometheus.NewRegistry(), nil)
	l.update(prepare(joined))
	sink := loadSink{l}
	want := accesslog.LoadLog{Pool: "docs-prefill", HostHeader: fleet.DefaultPrefillHeader}
	if ll, ok := sink.LoadPool("docs"); !ok || ll != want {
		t.Fatalf("LoadPool(docs) = %+v, %v; want %+v", ll, ok, want)
	}
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	sink.Start(1, "docs-prefill", "d1", inflight.Attempt{Host: "10.0.0.2:8000", Bytes: 9000, ID: "d1", At: t0})
	sink.Start(1, "docs-prefill", "d2", inflight.Attempt{Host: "10.0.0.2:8000", Bytes: 300, ID: "d2", At: t0})
	sink.Computed(1, "docs-prefill", []string{"d1"})
	if changed, _ := l.decide(t0); !changed {
		t.Fatal("decide: no figures for the prefill pool")
	}
	var table *fleet.SlotTable
	for _, p := range prepare(WithLoad(joined, l.current())).Pools {
		if p.Name == "docs" {
			table = p.PrefillTable
		}
	}
	if table == nil || table.Load == nil || table.LoadInterval != time.Second {
		t.Fatalf("the decode pool's table carries no load: %+v", table)
	}
	got := map[string]uint64{}
	for i, h := range table.Hosts {
		got[h] = table.Load[i]
	}
	if got["10.0.0.1:8000"] != 0 || got["10.0.0.2:8000"] != 300 {
		t.Errorf("the table's load = %v, want d2's 300 bytes on 10.0.0.2:8000 only", got)
	}
}
