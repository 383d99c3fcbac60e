package reconcile

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/inflight"
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
	if h, ok := sink.LoadPool("docs"); !ok || h != "" {
		t.Fatalf("LoadPool(docs) = %q, %v; want no adapter header", h, ok)
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
	sink.Start(1, "docs", "r1", inflight.Attempt{Host: "10.0.0.1:8000", Bytes: 5000, At: t0})
	step(500*time.Millisecond, false) // not due
	step(time.Second, true)
	got := WithLoad(loadFleet(), l.current()).Pools[0]
	if !got.LoadAt.Equal(t0.Add(time.Second)) || got.Endpoints[0].InFlightBytes != 5000 || got.Endpoints[1].InFlightBytes != 0 {
		t.Fatalf("WithLoad: load at %s, bytes %d and %d", got.LoadAt, got.Endpoints[0].InFlightBytes, got.Endpoints[1].InFlightBytes)
	}
	step(2*time.Second, false) // unchanged
	step(6*time.Second, true)  // refreshed: five intervals old
	sink.End(1, "docs", "r1")
	step(7*time.Second, true)
	if b := l.current()["docs"].Bytes; len(b) != 0 {
		t.Fatalf("after the end: %v", b)
	}
	step(20*time.Second, false) // all zero: no refresh needed
	sink.CloseStream(1)
	step(21*time.Second, true) // no view: the table carries no load
	if _, ok := l.current()["docs"]; ok {
		t.Fatal("a pool without log streams kept its figures")
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
	if h, ok := sink.LoadPool("docs"); !ok || h != fleet.DefaultAdapterHeader {
		t.Fatalf("LoadPool(docs) = %q, %v; want %q", h, ok, fleet.DefaultAdapterHeader)
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
