package reconcile

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/hotkeys"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/xds/accesslog"
	"github.com/kvxds/kvxds/xds/envoylb"
	"github.com/kvxds/kvxds/xds/server"
	"github.com/kvxds/kvxds/xds/translate"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

const hotPolicy = `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    key { prompt_prefix = 256 }
  }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"] }
}
pool "plain" {
  port = 10001
  hash {
    key { header = "x-session-id" }
    hot_keys { enabled = false }
  }
  static { endpoints = ["10.0.1.1:8000"] }
}
`

// withHot turns hot keys on for pool in p (the policy block decodes into
// the same settings).
func withHot(t *testing.T, p *policy.Policy, pool string, interval time.Duration) *policy.Policy {
	t.Helper()
	for i := range p.Pools {
		if p.Pools[i].Name == pool {
			p.Pools[i].Hash.Hot = &fleet.HotKeys{Max: 4, Interval: interval, HalfLife: time.Minute, LogCluster: "kvxds"}
			return p
		}
	}
	t.Fatalf("no pool %s", pool)
	return nil
}

func TestWithHotKeys(t *testing.T) {
	p := withHot(t, mustParse(t, hotPolicy), "chat", time.Second)
	tables := HotTables{
		"chat": {
			{Key: 1, Value: "00000000000000ff", Share: 0.3, Spread: 4},
			{Key: 0, Value: "b", Share: 0.2, Spread: 2},
			{Key: 0, Value: "a", Share: 0.5, Spread: 8},
			{Key: 0, Value: "a", Share: 0.5, Spread: 8}, // twice
			{Key: 2, Value: "no such key", Share: 0.5, Spread: 8},
			{Key: 0, Value: "bad spread", Share: 0.5, Spread: 3},
			{Key: 0, Value: "too wide", Share: 0.5, Spread: 512},
			{Key: 0, Value: "bad\nvalue", Share: 0.5, Spread: 4},
		},
		"plain": {{Key: 0, Value: "a", Share: 0.5, Spread: 8}}, // hot keys off
	}
	f := WithHotKeys(Join(p, StaticTargets(p), nil), tables)
	want := []fleet.HotKey{
		{Key: 0, Value: "a", Share: 0.5, Spread: 8},
		{Key: 0, Value: "b", Share: 0.2, Spread: 2},
		{Key: 1, Value: "00000000000000ff", Share: 0.3, Spread: 4},
	}
	if got := f.Pools[0].HotKeys; !reflect.DeepEqual(got, want) {
		t.Errorf("chat's table = %+v, want %+v", got, want)
	}
	if got := f.Pools[1].HotKeys; got != nil {
		t.Errorf("plain has hot keys off, got %+v", got)
	}
	if _, err := fleet.Prepare(f); err != nil {
		t.Errorf("the model does not prepare: %v", err)
	}
	// Over max: the highest shares stay.
	p.Pools[0].Hash.Hot.Max = 2
	f = WithHotKeys(Join(p, StaticTargets(p), nil), tables)
	want = []fleet.HotKey{{Key: 0, Value: "a", Share: 0.5, Spread: 8}, {Key: 1, Value: "00000000000000ff", Share: 0.3, Spread: 4}}
	if got := f.Pools[0].HotKeys; !reflect.DeepEqual(got, want) {
		t.Errorf("chat's table over max = %+v, want %+v", got, want)
	}
}

// Declared values are in the table without any decision (a follower
// without the leader's document, a pool no log reaches), spread over
// every healthy replica, counted in max before the learned entries, and
// never twice.
func TestWithHotKeysDeclared(t *testing.T) {
	p := withHot(t, mustParse(t, hotPolicy), "chat", time.Second)
	p.Pools[0].Hash.Hot.Max = 3
	p.Pools[0].Hash.Hot.Declared = []fleet.DeclaredHotKey{{Key: 0, Value: "app-0"}, {Key: 0, Value: "acme"}}
	wide := hotkeys.Spread(1, 4) // four healthy replicas
	if wide != 64 {
		t.Fatalf("Spread(1, 4) = %d, want 64", wide)
	}
	declared := []fleet.HotKey{
		{Key: 0, Value: "acme", Share: 1, Spread: wide, Declared: true},
		{Key: 0, Value: "app-0", Share: 1, Spread: wide, Declared: true},
	}
	for _, tc := range []struct {
		name  string
		table []fleet.HotKey
		want  []fleet.HotKey
	}{
		{"no table", nil, declared},
		{"learned beside", []fleet.HotKey{{Key: 0, Value: "b", Share: 0.2, Spread: 2}},
			[]fleet.HotKey{declared[0], declared[1], {Key: 0, Value: "b", Share: 0.2, Spread: 2}}},
		{"learned too", []fleet.HotKey{{Key: 0, Value: "app-0", Share: 0.9, Spread: 8}}, declared},
		{"over max", []fleet.HotKey{
			{Key: 0, Value: "b", Share: 0.2, Spread: 2},
			{Key: 1, Value: "00000000000000ff", Share: 0.3, Spread: 4},
		}, []fleet.HotKey{declared[0], declared[1], {Key: 1, Value: "00000000000000ff", Share: 0.3, Spread: 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := WithHotKeys(Join(p, StaticTargets(p), nil), HotTables{"chat": tc.table})
			if got := f.Pools[0].HotKeys; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("chat's table = %+v, want %+v", got, tc.want)
			}
			m, err := fleet.Prepare(f)
			if err != nil {
				t.Fatalf("the model does not prepare: %v", err)
			}
			if got := m.Fleet().Pools[0].HotKeys; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("prepared table = %+v, want %+v (drops %+v)", got, tc.want, m.HotKeyDrops())
			}
		})
	}
	// A replica out of the table narrows the spread to what the healthy
	// ones fill.
	targets := StaticTargets(p)
	f := Join(p, targets, nil)
	for i := range f.Pools[0].Endpoints[1:] {
		f.Pools[0].Endpoints[1+i].Health = fleet.Draining
	}
	f = WithHotKeys(f, nil)
	if got, want := f.Pools[0].HotKeys[0].Spread, hotkeys.Spread(1, 1); got != want {
		t.Errorf("spread with one healthy replica %d, want %d", got, want)
	}
}

func TestShownValue(t *testing.T) {
	keys := []fleet.HashKey{{Header: "x-tenant"}, {Conversation: true}}
	if got := ShownValue(keys, 1, "0123456789abcdef"); got != "0123456789abcdef" {
		t.Errorf("a body key's value is its hash already: got %q", got)
	}
	got := ShownValue(keys, 0, "acme-corp")
	if len(got) != 8 || got == "acme-cor" {
		t.Errorf("a header key's value shows as 8 hex digits of its hash: got %q", got)
	}
	if ShownValue(keys, 0, "acme-corp") != got || ShownValue(keys, 0, "other") == got {
		t.Errorf("shown values are not a function of the value")
	}
}

// envoyFirst is the replica Envoy's table, as served, gives a value.
func envoyFirst(t *testing.T, r *Reconciler, pool, value string) string {
	t.Helper()
	r.hot.mu.Lock()
	defer r.hot.mu.Unlock()
	ht := r.hot.pools[pool].homes[pool]
	return ht.addrs[ht.first(value)]
}

func otherThan(addr string) string {
	if addr == "10.0.0.1:8000" {
		return "10.0.0.2:8000"
	}
	return "10.0.0.1:8000"
}

// A standalone instance decides the table from the requests logged,
// serves it in the model and the status, counts requests sent away by
// reason, and keeps the table when the logs stop.
func TestHotKeysStandalone(t *testing.T) {
	p := withHot(t, mustParse(t, hotPolicy), "chat", 50*time.Millisecond)
	reg := prometheus.NewRegistry()
	srv := server.New(server.Options{})
	r := New(Options{Sink: srv, Logger: hclog.NewNullLogger(), Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.Close()
	if err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	versions := srv.Versions(translate.Envoy)
	go r.Run(ctx)
	sink := r.AccessLogSink()
	if pool, headers, ok := sink.KeyHeaders("chat"); !ok || pool != "chat" || !reflect.DeepEqual(headers, []string{"x-session-id", "x-kvxds-key-2"}) {
		t.Fatalf("KeyHeaders(chat) = %q, %q, %v", pool, headers, ok)
	}
	if _, _, ok := sink.KeyHeaders("plain"); ok {
		t.Errorf("a pool without hot keys takes logs")
	}
	const hot = "0123456789abcdef" // a prompt prefix's hash
	home := envoyFirst(t, r, "chat", hot)
	for i := range 400 {
		req := accesslog.Request{Pool: "chat", Cluster: "chat", Key: 0, Value: fmt.Sprint("s", i)}
		if i%2 == 0 {
			req.Key, req.Value = 1, hot
		}
		req.Upstream = envoyFirst(t, r, "chat", req.Value)
		sink.Observe(req)
	}
	waitFor(t, "the hot key in the model", func() bool { return len(r.Fleet().Pools[0].HotKeys) == 1 })
	hk := r.Fleet().Pools[0].HotKeys[0]
	if hk.Key != 1 || hk.Value != hot || hk.Spread != 32 || hk.Share < 0.45 || hk.Share > 0.55 {
		t.Errorf("table entry %+v, want key 1 %s at 0.5, spread 32", hk, hot)
	}
	// A table change is a route change: nothing else moves.
	after := srv.Versions(translate.Envoy)
	for typ, v := range versions {
		if typ != "type.googleapis.com/envoy.config.route.v3.RouteConfiguration" && after[typ] != v {
			t.Errorf("%s moved from %s to %s with the hot-key table", typ, v, after[typ])
		}
	}
	// The push is counted just after the model is shown.
	waitFor(t, "the hot_keys push counted", func() bool { return testutil.ToFloat64(r.updates.WithLabelValues(causeHotKeys)) >= 1 })

	// Requests sent away, by reason.
	sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: 1, Value: hot, Upstream: otherThan(home)})
	cold := "cold-session"
	sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: 0, Value: cold, Upstream: otherThan(envoyFirst(t, r, "chat", cold))})
	sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: 0, Value: cold, Upstream: envoyFirst(t, r, "chat", cold)})
	st := r.Status()
	hs := st.Pools[0].HotKeys
	if hs == nil || st.Pools[1].HotKeys != nil {
		t.Fatalf("status hot keys: %+v, %+v", hs, st.Pools[1].HotKeys)
	}
	if hs.Requests != 403 || hs.Away["spread"] != 1 || hs.Away["bound"] != 1 || hs.Away["escape"] != 0 {
		t.Errorf("status: %d requests, away %v; want 403, spread 1, bound 1", hs.Requests, hs.Away)
	}
	if len(hs.Keys) != 1 || hs.Keys[0].Value != hot || hs.Keys[0].KeyName != "prompt_prefix" || hs.Keys[0].Spread != 32 {
		t.Errorf("status keys: %+v", hs.Keys)
	}
	if got := testutil.ToFloat64(r.hot.away.WithLabelValues("chat", "spread")); got != 1 {
		t.Errorf("kvxds_requests_away_total{reason=spread} = %v", got)
	}

	// Logs stop: the table stays.
	time.Sleep(300 * time.Millisecond)
	if got := r.Fleet().Pools[0].HotKeys; len(got) != 1 || got[0] != hk {
		t.Errorf("without logs the table changed: %+v", got)
	}
	// Traffic moves on: the key cools out of the table.
	for i := range 2000 {
		v := fmt.Sprint("t", i)
		sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: 0, Value: v, Upstream: envoyFirst(t, r, "chat", v)})
	}
	waitFor(t, "the cooled key out of the table", func() bool { return len(r.Fleet().Pools[0].HotKeys) == 0 })
}

func TestAwayEscape(t *testing.T) {
	p := withHot(t, mustParse(t, hotPolicy), "chat", time.Hour)
	// The key's first replica is drained by the escape hatch.
	const key = "session-7"
	r := New(Options{Sink: server.New(server.Options{}), Logger: hclog.NewNullLogger(), Peers: scripted{}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.Close()
	if err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	first := envoyFirst(t, r, "chat", key)
	haHandler{r}.Published(ha.Document{Leader: "a", Term: 1, Pools: ha.Decisions{"chat": {first: {Weight: 1, Saturated: true}}}})
	r.pushMu.Lock()
	err := r.pushLocked(ctx, p, causeLeader)
	r.pushMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if got := envoyFirst(t, r, "chat", key); got != first {
		t.Fatalf("the first replica moved with its health: %s → %s", first, got)
	}
	sink := r.AccessLogSink()
	sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: 0, Value: key, Upstream: otherThan(first)})
	if got := r.Status().Pools[0].HotKeys.Away; got["escape"] != 1 || got["bound"] != 0 {
		t.Errorf("away = %v, want one escape", got)
	}
}

// The leader publishes its tables with its decisions; a follower serves
// the leader's; a new leader starts from its predecessor's.
func TestHotKeysFollowLeader(t *testing.T) {
	p := withHot(t, mustParse(t, hotPolicy), "chat", 300*time.Millisecond)
	peers := scripted{h: make(chan ha.Handler, 1)}
	board := ha.NewBoard()
	r := New(Options{Sink: server.New(server.Options{}), Logger: hclog.NewNullLogger(), ID: "b", Peers: peers, Board: board})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.Close()
	if err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	go r.Run(ctx)
	h := <-peers.h
	table := []fleet.HotKey{{Key: 0, Value: "tenant-a", Share: 0.6, Spread: 8}}
	h.Published(ha.Document{Leader: "a", Term: 1, Time: time.Now(), HotKeys: HotTables{"chat": table}})
	waitFor(t, "the leader's table", func() bool { return reflect.DeepEqual(r.Fleet().Pools[0].HotKeys, table) })

	// A follower observes but never decides: its sample alone would
	// empty the table.
	sink := r.AccessLogSink()
	for i := range 500 {
		sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: 0, Value: fmt.Sprint("u", i)})
	}
	time.Sleep(100 * time.Millisecond)
	if got := r.Fleet().Pools[0].HotKeys; !reflect.DeepEqual(got, table) {
		t.Fatalf("a follower changed the table: %+v", got)
	}

	// Leading, it starts from the table served, publishes it, then
	// decides from what it observes.
	h.Leading(true, 2)
	waitFor(t, "the new leader's document", func() bool {
		doc, ok := board.Get()
		return ok && doc.Leader == "b" && reflect.DeepEqual(doc.HotKeys["chat"], table)
	})
	for i := range 500 {
		sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: 0, Value: fmt.Sprint("w", i)})
	}
	waitFor(t, "its own table published", func() bool {
		doc, ok := board.Get()
		return ok && doc.Leader == "b" && len(doc.HotKeys["chat"]) == 0 && len(r.Fleet().Pools[0].HotKeys) == 0
	})
}

// In a pool whose Envoys pick replicas by its slot table, a key's first
// replica is its slot's, not the ring's: a request there is not away, one
// on the ring's replica is.
func TestAwayPick(t *testing.T) {
	src := strings.Replace(hotPolicy, `key { header = "x-session-id" }`, `balance_on = "prompt_bytes"
    key { header = "x-session-id" }`, 1)
	p := withHot(t, mustParse(t, src), "chat", time.Hour)
	r := New(Options{Sink: server.New(server.Options{}), Logger: hclog.NewNullLogger(), Peers: scripted{}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.Close()
	if err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	pool := r.Fleet().Pools[0]
	table := translate.PickTable(&pool, translate.Envoy)
	if table == nil {
		t.Fatal("no pick table: the policy does not bound on prompt bytes")
	}
	// A key whose slot's replica is not the ring's.
	var key, slot, ring string
	for i := range 100 {
		key = fmt.Sprint("session-", i)
		slot = table.Host(bodykey.PrefillSlot(key, fleet.PrefillSlots))
		r.hot.mu.Lock()
		ht := *r.hot.pools["chat"].homes["chat"]
		r.hot.mu.Unlock()
		ht.slots = nil
		if ring = ht.addrs[ht.first(key)]; ring != slot {
			break
		}
	}
	if ring == slot {
		t.Fatal("every key's slot replica is its ring replica: the test tells nothing")
	}
	if got := envoyFirst(t, r, "chat", key); got != slot {
		t.Fatalf("first replica of %s: %s, want its slot's %s (the ring's is %s)", key, got, slot, ring)
	}
	sink := r.AccessLogSink()
	sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: 0, Value: key, Upstream: slot})
	sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: 0, Value: key, Upstream: ring})
	// Where the filter followed the key's last request.
	sink.Observe(accesslog.Request{Pool: "chat", Cluster: "chat", Key: 0, Value: key, Upstream: ring, Followed: true})
	if got := r.Status().Pools[0].HotKeys.Away; got["bound"] != 1 || got["followed"] != 1 || got["escape"] != 0 || got["spread"] != 0 {
		t.Errorf("away = %v, want one bound, one followed", got)
	}
	if got := r.Status().Pools[0].BalanceOn; got != fleet.BalanceOnPromptBytes {
		t.Errorf("status balance_on %q, want %q", got, fleet.BalanceOnPromptBytes)
	}
	if got := r.Status().Pools[1].BalanceOn; got != "" {
		t.Errorf("a pool bounding requests: status balance_on %q", got)
	}
}

// TestHotHomes checks where Decide's crowding believes a key and a hot
// key's buckets land against Envoy's model routing the served routes,
// with replicas of unequal weights and one out of the table (which moves
// some keys whose first replica is another: the ring is built anew).
func TestHotHomes(t *testing.T) {
	hot := fleet.DefaultHotKeys()
	p := fleet.Pool{Name: "chat", Settings: fleet.Settings{Port: 10000, Hash: fleet.Hash{
		Algorithm: fleet.RingHash, Keys: []fleet.HashKey{{Header: "x-tenant"}}, Hot: &hot,
	}}}
	for i := range 8 {
		p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000, Weight: uint32(1 + i%3), Health: fleet.Healthy})
	}
	p.Endpoints[3].Health = fleet.Draining
	p.HotKeys = []fleet.HotKey{{Key: 0, Value: "acme", Share: 0.5, Spread: 16}}
	m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{p}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := translate.Translate(m, translate.Envoy)
	if err != nil {
		t.Fatal(err)
	}
	router, err := envoylb.NewRouter(res.Routes, res.Clusters, res.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	hp := &hotPool{homes: homeTables(res, []string{"chat"}, nil)}
	home := hp.home("chat")
	if home == nil {
		t.Fatal("no homes for a pool Envoy hashes")
	}
	pick := func(headers ...[2]string) int {
		t.Helper()
		d, err := router.Pick("chat", &envoylb.Request{Path: "/", Headers: headers}, nil)
		if err != nil || !d.Hashed {
			t.Fatalf("pick %v: %+v, %v", headers, d, err)
		}
		return d.Host
	}
	for i := range 64 {
		v := fmt.Sprintf("tenant-%d", i)
		if got, want := pick([2]string{"x-tenant", v}), home(hotkeys.ID{Value: v}, 1, 0); got != want {
			t.Errorf("%s on replica %d, home says %d", v, got, want)
		}
	}
	replicas := map[int]bool{}
	for b := range 16 {
		want := home(hotkeys.ID{Value: "acme"}, 16, b)
		// Only the first log2(16) bits of the spread header count.
		got := pick([2]string{"x-tenant", "acme"}, [2]string{"x-kvxds-spread", fmt.Sprintf("%04b1010", b)})
		replicas[got] = true
		if got != want {
			t.Errorf("bucket %d on replica %d, home says %d", b, got, want)
		}
	}
	if len(replicas) < 3 {
		t.Errorf("16 buckets on %d replicas", len(replicas))
	}
}

// TestHotHomesPicked: a pool whose replicas a filter picks from a slot
// table (here a decode pool's prefill pool) spreads keys by their share
// alone; a pool Envoy hashes itself gets homes.
func TestHotHomesPicked(t *testing.T) {
	hot := fleet.DefaultHotKeys()
	pool := func(name string, port uint32, net int) fleet.Pool {
		p := fleet.Pool{Name: name, Settings: fleet.Settings{Port: port, Hash: fleet.Hash{
			Algorithm: fleet.RingHash, Keys: []fleet.HashKey{{Header: "x-session-id"}}, Hot: &hot,
		}}}
		for i := range 4 {
			p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: fmt.Sprintf("10.0.%d.%d", net, i+1), Port: 8000, Weight: 1, Health: fleet.Healthy})
		}
		return p
	}
	decode := pool("decode", 10002, 2)
	decode.Balancer = fleet.LeastRequest
	decode.Hash = fleet.Hash{}
	decode.Prefill = &fleet.Prefill{Pool: "prefill", Header: "x-prefiller-host-port"}
	m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{pool("chat", 10000, 0), pool("prefill", 10001, 1), decode}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := translate.Translate(m, translate.Envoy)
	if err != nil {
		t.Fatal(err)
	}
	h := newHotState(prometheus.NewRegistry())
	h.update(m.Fleet(), func(string) fleet.Plan { return fleet.Plan{} }, res)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pools["chat"].home("chat") == nil {
		t.Error("no homes for a pool Envoy hashes")
	}
	if hp := h.pools["prefill"]; hp == nil || hp.home("prefill") != nil {
		t.Errorf("a prefill pool has homes (or no hot state: %v)", hp == nil)
	}
}
