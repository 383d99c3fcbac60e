package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/xds/accesslog"
	"github.com/kvxds/kvxds/xds/server"
	"github.com/kvxds/kvxds/xds/translate"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

const prefillPolicy = `
pool "chat" {
  port           = 10000
  load_balancing = "least_request"
  prefill { pool = "chat-prefill" }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000"] }
}
pool "chat-prefill" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = [PREFILL] }
}
`

// applyPrefill starts a standalone reconciler pushing to a server, applies
// p, and returns them with a context that ends with the test.
func applyPrefill(t *testing.T, p *policy.Policy) (*Reconciler, *server.Server, context.Context) {
	t.Helper()
	srv := server.New(server.Options{})
	r := New(Options{Sink: srv, Logger: hclog.NewNullLogger(), Registerer: prometheus.NewRegistry()})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); r.Close() })
	if err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	return r, srv, ctx
}

// A decode pool's model carries its prefill pool's table; a prefill
// replica leaving changes the decode pool's routes (the table) and the
// prefill pool's endpoints, never a listener or Envoy's clusters; the
// status counts the logged requests by decode and prefill replica and
// keeps only pairs of replicas the model has.
func TestPrefillStandalone(t *testing.T) {
	three := `"10.0.1.1:8000", "10.0.1.2:8000", "10.0.1.3:8000"`
	r, srv, ctx := applyPrefill(t, mustParse(t, strings.Replace(prefillPolicy, "PREFILL", three, 1)))
	f := r.Fleet()
	if f.Pools[0].Name != "chat" || f.Pools[0].PrefillTable == nil || len(f.Pools[0].PrefillTable.Hosts) != 3 {
		t.Fatalf("decode pool %+v", f.Pools[0])
	}
	sink := r.AccessLogSink()
	if h := sink.(accesslog.PrefillSink).PrefillHeader("chat"); h != "x-prefiller-host-port" {
		t.Fatalf("prefill header %q", h)
	}
	if pool, _, ok := sink.KeyHeaders("chat"); !ok || pool != "chat" {
		t.Fatalf("a decode pool takes no logs")
	}
	obs := func(decode, prefill string, n int) {
		for range n {
			sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: -1, Upstream: decode, Prefill: prefill})
		}
	}
	obs("10.0.0.1:8000", "10.0.1.1:8000", 5)
	obs("10.0.0.1:8000", "10.0.1.3:8000", 2)
	obs("10.0.0.2:8000", "10.0.1.3:8000", 4)
	obs("10.0.0.2:8000", "", 3)              // prefilled on the decode replica
	obs("10.0.0.2:8000", "10.0.9.9:8000", 1) // not in the table
	st := r.Status().Pools[0].Prefill
	if st == nil || st.Pool != "chat-prefill" || len(st.Hosts) != 3 || st.Slots != 1024 {
		t.Fatalf("status prefill %+v", st)
	}
	if st.Requests != 15 || st.Remote != 11 || st.Unknown != 1 || len(st.Pairs) != 3 || st.Pairs[0].Requests != 5 {
		t.Errorf("status counts %+v", st)
	}
	if got := testutil.ToFloat64(r.prefill.requests.WithLabelValues("chat", prefillLocal)); got != 3 {
		t.Errorf("local prefills = %v, want 3", got)
	}

	before := srv.Versions(translate.Envoy)
	if err := r.Apply(ctx, mustParse(t, strings.Replace(prefillPolicy, "PREFILL", `"10.0.1.1:8000", "10.0.1.2:8000"`, 1))); err != nil {
		t.Fatal(err)
	}
	after := srv.Versions(translate.Envoy)
	for typ, v := range before {
		changed := after[typ] != v
		want := strings.HasSuffix(typ, "RouteConfiguration") || strings.HasSuffix(typ, "ClusterLoadAssignment")
		if changed != want {
			t.Errorf("%s changed %v, want %v", typ, changed, want)
		}
	}
	st = r.Status().Pools[0].Prefill
	if len(st.Hosts) != 2 || len(st.Pairs) != 1 || st.Pairs[0].Prefill != "10.0.1.1:8000" || st.Requests != 15 {
		t.Errorf("after 10.0.1.3 left: %+v", st)
	}
}

// A decode pool's logged requests are its prefill pool's too: a prefill
// key hot among them becomes a hot key of the prefill pool, and its entry
// reaches the decode pool's prefill table, where Envoy's Lua filter
// spreads it; a routes-only change of the decode pool.
func TestPrefillHotKeys(t *testing.T) {
	p := withHot(t, mustParse(t, strings.Replace(prefillPolicy, "PREFILL",
		`"10.0.1.1:8000", "10.0.1.2:8000", "10.0.1.3:8000", "10.0.1.4:8000"`, 1)), "chat-prefill", 50*time.Millisecond)
	r, srv, ctx := applyPrefill(t, p)
	go r.Run(ctx)
	sink := r.AccessLogSink().(accesslog.PrefillSink)
	if pool, keys := sink.PrefillKeys("chat"); pool != "chat-prefill" || strings.Join(keys, ",") != "x-session-id" {
		t.Fatalf("PrefillKeys(chat) = %q, %q", pool, keys)
	}
	before := srv.Versions(translate.Envoy)
	for i := range 400 {
		v := fmt.Sprint("s", i)
		if i%2 == 0 {
			v = "hot-session"
		}
		sink.Observe(accesslog.Request{Pool: "chat-prefill", Key: 0, Value: v})
	}
	waitFor(t, "the hot key in the decode pool's prefill table", func() bool {
		t := r.Fleet().Pools[0].PrefillTable
		return t != nil && len(t.Hot) == 1
	})
	hk := r.Fleet().Pools[0].PrefillTable.Hot[0]
	if hk.Key != 0 || hk.Value != "hot-session" || hk.Spread < 2 {
		t.Errorf("hot entry %+v", hk)
	}
	after := srv.Versions(translate.Envoy)
	for typ, v := range before {
		if changed := after[typ] != v; changed != strings.HasSuffix(typ, "RouteConfiguration") {
			t.Errorf("%s changed %v with the hot prefill key", typ, changed)
		}
	}

	// The decode pool's logged requests that named another prefill
	// replica than their key's slot's are counted away: a hot key's as
	// spread, another's as bound.
	tab := r.Fleet().Pools[0].PrefillTable
	home := func(v string) string { return tab.Host(bodykey.PrefillSlot(v, fleet.PrefillSlots)) }
	other := func(v string) string {
		for _, h := range tab.Hosts {
			if h != home(v) {
				return h
			}
		}
		return ""
	}
	for _, tc := range []struct{ value, named string }{
		{"hot-session", other("hot-session")}, {"s1", other("s1")}, {"s1", home("s1")}, {"s2", home("s2")},
	} {
		sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: -1, Upstream: "10.0.0.1:8000", Prefill: tc.named, PrefillKey: 0, PrefillValue: tc.value})
	}
	st := r.Status().Pools[0].Prefill
	if st.Keyed != 4 || st.Away[status.AwaySpread] != 1 || st.Away[status.AwayBound] != 1 {
		t.Errorf("keyed %d, away %v; want 4 keyed, 1 spread and 1 bound", st.Keyed, st.Away)
	}
	if got := testutil.ToFloat64(r.prefill.away.WithLabelValues("chat", status.AwayBound)); got != 1 {
		t.Errorf("kvxds_prefill_requests_away_total{reason=bound} = %v, want 1", got)
	}
}
