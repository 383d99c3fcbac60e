package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/hotkeys"
	"github.com/kvxds/kvxds/test/sim"
	"github.com/kvxds/kvxds/test/workload"
	"github.com/kvxds/kvxds/xds/envoylb"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

func requireLuaJIT(t *testing.T) {
	t.Helper()
	if _, err := LuaJIT(); err != nil {
		if os.Getenv("KVXDS_REQUIRE_LUAJIT") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// kvxdsWithEnvoy starts kvxds on policy pol as mode and one simulated
// Envoy attached to it, routing to addrs. The caller stops kvxds.
func kvxdsWithEnvoy(ctx context.Context, t *testing.T, pol, name string, mode Mode, addrs []string) (*kvxdsRun, *envoyClient) {
	t.Helper()
	k, err := startKVXDS(ctx, Config{}.Defaults(), pol, name, mode)
	if err != nil {
		t.Fatal(err)
	}
	envoys, err := k.connectEnvoys(ctx, Config{Clients: 1}, name, mode, addrs)
	if err != nil {
		k.stop()
		t.Fatal(err)
	}
	return k, envoys[0]
}

// TestEnvoyDataPlane: an Envoy node fed by a real kvxds over ADS keys a
// request on its body through the generated Lua filter (the header equals
// the Go function's), sends one prefix to one replica while nothing is in
// flight, spills it under bounded load when its replica holds more than
// its share, and streams a reply over HTTP.
func TestEnvoyDataPlane(t *testing.T) {
	requireLuaJIT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, addrs := startTestFleet(t, 4)
	const prefix = 64
	// Envoy's own bound, which a prompt_prefix key otherwise swaps for
	// the pick filter's bound on prompt bytes.
	pol, err := Policy(PolicyOptions{Mode: KVXDS, Endpoints: addrs, TimeScale: 10, Scrape: time.Second, BodyKey: PrefixKey(prefix).HCL,
		BalanceOn: fleet.BalanceOnRequests, BalanceFactor: BoundedFactor})
	if err != nil {
		t.Fatal(err)
	}
	k, e := kvxdsWithEnvoy(ctx, t, pol, "envoy-test", KVXDS, addrs)
	defer k.stop()

	head := strings.Repeat("word ", 20) // 100 bytes: past the prefix
	reqs := []*Request{
		{Request: workload.Request{Seq: 0, Prompt: head + "one tail", MaxTokens: 3}},
		{Request: workload.Request{Seq: 1, Prompt: head + "another tail entirely", MaxTokens: 4}},
	}
	var owner string
	for _, r := range reqs {
		body := completionsBody(r)
		set, _, err := luaOf(t, e).run(luaSpecsOf(e), nil, body)
		if err != nil {
			t.Fatal(err)
		}
		want, ok := bodykey.PromptPrefix(body, prefix)
		if !ok || len(set) != 1 || set[0] != [2]string{bodykey.Header(0), want} {
			t.Fatalf("Lua set %v, want %s = %s", set, bodykey.Header(0), want)
		}
		addr, release, err := e.route(nil, body)
		if err != nil {
			t.Fatal(err)
		}
		release()
		if owner == "" {
			owner = addr
		} else if addr != owner {
			t.Errorf("one prompt prefix went to %s and %s", owner, addr)
		}
	}

	// Bounded load (150, Envoy's default factor): with requests of one
	// key held in flight, the key's replica takes its slots and the rest
	// spill.
	used := map[string]int{}
	var releases []func()
	for range 12 {
		addr, release, err := e.route(nil, completionsBody(reqs[0]))
		if err != nil {
			t.Fatal(err)
		}
		used[addr]++
		releases = append(releases, release)
	}
	for _, r := range releases {
		r()
	}
	if len(used) < 2 || used[owner] > 6 {
		t.Errorf("12 requests of one key in flight landed %v; want the owner %s at no more than 6 and the rest spilled", used, owner)
	}

	res := e.send(ctx, reqs[1], time.Now(), false)
	if res.Err != nil || res.Tokens != 4 || res.Replica == "" || res.PromptTokens != 23 || res.First < 0 {
		t.Errorf("streamed %+v", res)
	}
}

// luaOf is e's Lua filter, started from the received listener by a
// first request.
func luaOf(t *testing.T, e *envoyClient) *luaFilter {
	t.Helper()
	if _, release, err := e.route(nil, []byte(`{}`)); err != nil {
		t.Fatal(err)
	} else {
		release()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lua == nil {
		t.Fatal("the pool's listener has no Lua filter")
	}
	return e.lua
}

// luaSpecsOf is the Lua filters of e's newest configuration.
func luaSpecsOf(e *envoyClient) []luaSpec {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state.lua
}

func TestWeightedRR(t *testing.T) {
	ec := &envoyCluster{healthy: []int{0, 1, 3}}
	ec.hosts = make([]envoylb.Host, 4)
	ec.hosts[0].Weight, ec.hosts[1].Weight, ec.hosts[2].Weight, ec.hosts[3].Weight = 1, 2, 5, 1
	var got []int
	for n := range uint64(8) {
		got = append(got, ec.weightedRR(n))
	}
	if want := []int{0, 1, 3, 1, 0, 1, 3, 1}; !slices.Equal(got, want) {
		t.Errorf("picks %v, want %v", got, want)
	}
}

// TestEndToEndEnvoy replays a few seconds of Zipf tenants on the Envoy
// data plane: affinity beats round robin on the engines' counters, no
// request fails, only the hot tenant moves (spread by its hot-key route),
// and bounded load runs and spreads the hot tenant.
func TestEndToEndEnvoy(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end benchmark run; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{
		Workloads:  []string{"zipf-tenants"},
		DataPlanes: []DataPlane{Envoy},
		Replicas:   4,
		Load:       0.5,
		Duration:   30 * time.Second,
		TimeScale:  5,
		Modes:      []Mode{RoundRobin, KVXDS, KVXDSBounded},
	})
	if err != nil {
		t.Fatal(err)
	}
	wr := rep.Workloads[0]
	if wr.DataPlane != Envoy || wr.label() != "zipf-tenants-envoy" {
		t.Errorf("report of %q on %q", wr.Name, wr.DataPlane)
	}
	rr, _ := wr.Mode(RoundRobin)
	kv, _ := wr.Mode(KVXDS)
	kb, ok := wr.Mode(KVXDSBounded)
	if !ok {
		t.Fatal("kvxds+bounded did not run")
	}
	t.Logf("hit rate %.3f / %.3f / %.3f, balance %.2f / %.2f / %.2f, sessions moved %d / %d / %d",
		rr.HitRate, kv.HitRate, kb.HitRate, rr.Balance, kv.Balance, kb.Balance, rr.SessionsMoved, kv.SessionsMoved, kb.SessionsMoved)
	for _, m := range []ModeResult{rr, kv, kb} {
		if m.Failed != 0 {
			t.Errorf("%s: %d requests failed", m.Mode, m.Failed)
		}
	}
	if !(kv.HitRate > rr.HitRate) {
		t.Errorf("kvxds hit rate %.3f does not exceed round robin's %.3f", kv.HitRate, rr.HitRate)
	}
	// Hot keys are on: the Lua filter sets every request's spread
	// sub-key from its conversation, so once kvxds has learned the hot
	// tenant, its route spreads the tenant's conversations over a few
	// replicas, and a tenant large enough to be spread for its replica's
	// sake (a quarter of one replica's share) may move too; no other.
	movable := 0
	for _, s := range workload.ZipfTenants().Shares() {
		if s >= hotkeys.MinCrowd/4 {
			movable++
		}
	}
	if kv.SessionsMoved > movable {
		t.Errorf("pure affinity moved %d sessions; only the %d tenants hot keys may spread may move", kv.SessionsMoved, movable)
	}
	if kb.SessionsMoved == 0 {
		t.Error("bounded load spilled no session under a hot tenant")
	}
}

// Each simulated Envoy of a run draws its own random sequence (least
// request's two hosts, keyless hashes), as separate processes do, even
// where node names are of one length.
func TestNodeSeed(t *testing.T) {
	seen := map[uint64]string{}
	for i := range 12 {
		node := fmt.Sprintf("kvxds-bench-envoy-trace-least_request-%d", i)
		s := nodeSeed(node)
		if prev, ok := seen[s]; ok {
			t.Fatalf("%s and %s share seed %d", prev, node, s)
		}
		seen[s] = node
	}
}

// startTestFleet starts n simulated replicas (400 KV blocks, time scale
// 10), closed when the test ends, and returns them with their addresses.
func startTestFleet(t *testing.T, n int) ([]*sim.Replica, []string) {
	t.Helper()
	reps, err := sim.StartFleet(n, simConfig(400, 10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range reps {
			r.Close()
		}
	})
	addrs := make([]string, len(reps))
	for i, r := range reps {
		addrs[i] = r.Addr()
	}
	return reps, addrs
}

// The simulated Envoy's Lua driver keeps each request's dynamic metadata
// and runs envoy_on_response when its response starts, as Envoy does: a
// filter counting requests in flight sees each one end.
func TestLuaDriverResponses(t *testing.T) {
	requireLuaJIT(t)
	src := `
local n = 0
function envoy_on_request(h)
  n = n + 1
  h:headers():replace("x-in-flight", tostring(n))
  h:streamInfo():dynamicMetadata():set("counter", "counted", true)
end
function envoy_on_response(h)
  local md = h:streamInfo():dynamicMetadata():get("counter")
  if md ~= nil and md.counted then n = n - 1 end
end
`
	l, run := counterFilter(t, src)
	a := run("1")
	b := run("2")
	l.respond(a)
	c := run("2")
	l.respond(b)
	l.respond(c)
	l.respond(c) // a second response of one request changes nothing
	run("1")
}

// counterFilter runs filter src under the driver; run runs a request
// and checks the headers left: extra, then x-in-flight = want.
func counterFilter(t *testing.T, src string, extra ...[2]string) (*luaFilter, func(want string) uint64) {
	t.Helper()
	fs := []luaSpec{{name: "counter", source: src, metadata: "{}"}}
	l, err := startLua(fs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	return l, func(want string) uint64 {
		t.Helper()
		hdrs, id, err := l.run(fs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := append(slices.Clone(extra), [2]string{"x-in-flight", want}); !slices.Equal(hdrs, want) {
			t.Fatalf("headers %v, want %v", hdrs, want)
		}
		return id
	}
}

// A filter that waits for the end of a response (looping over
// bodyChunks in envoy_on_response) resumes at finish, not at respond; an
// upstream override host comes back as ":override".
func TestLuaDriverResponseEnds(t *testing.T) {
	requireLuaJIT(t)
	src := `
local n = 0
function envoy_on_request(h)
  n = n + 1
  h:headers():replace("x-in-flight", tostring(n))
  h:setUpstreamOverrideHost("10.0.0.1:8000", false)
end
function envoy_on_response(h)
  for _ in h:bodyChunks() do end
  n = n - 1
end
`
	l, run := counterFilter(t, src, [2]string{":override", "10.0.0.1:8000"})
	a := run("1")
	l.respond(a)
	b := run("2") // a's response started, not ended
	l.finish(a)
	l.respond(b)
	l.finish(b)
	l.finish(b) // a second end changes nothing
	run("1")
}

// A pool bounding prompt bytes: the served pick filter names each keyed
// request's replica (its slot's, or the next with room) and the
// simulated Envoy sends it there; a request of one key goes where the
// last did while nothing is in flight, and a request without a key is
// left to the cluster.
func TestEnvoyPick(t *testing.T) {
	requireLuaJIT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, addrs := startTestFleet(t, 3)
	pol, err := Policy(PolicyOptions{Mode: KVXDSPrefix, Endpoints: addrs, TimeScale: 10, Scrape: time.Second,
		BodyKey: "prompt_prefix = 64", BalanceOn: fleet.BalanceOnPromptBytes})
	if err != nil {
		t.Fatal(err)
	}
	k, e := kvxdsWithEnvoy(ctx, t, pol, "pick-test", KVXDSPrefix, addrs)
	defer k.stop()
	prompt := func(i int) *Request {
		return &Request{Request: workload.Request{Prompt: strings.Repeat(fmt.Sprintf("document %d ", i), 20), MaxTokens: 2}}
	}
	var rt routing
	for deadline := time.Now().Add(20 * time.Second); rt.override == "" && time.Now().Before(deadline); {
		if rt, err = e.routeRequest(nil, KeyBody(prompt(0))); err != nil {
			t.Fatal(err)
		}
		rt.release()
		time.Sleep(50 * time.Millisecond)
	}
	seen := map[string]bool{}
	for i := range 30 {
		first, err := e.routeRequest(nil, KeyBody(prompt(i)))
		if err != nil {
			t.Fatal(err)
		}
		first.respond()
		first.finish()
		first.release()
		again, err := e.routeRequest(nil, KeyBody(prompt(i)))
		if err != nil {
			t.Fatal(err)
		}
		again.respond()
		again.finish()
		again.release()
		if first.override == "" || first.addr != first.override || again.addr != first.addr {
			t.Fatalf("key %d: override %q, sent to %s, then to %s", i, first.override, first.addr, again.addr)
		}
		if slices.ContainsFunc(first.headers, func(h [2]string) bool { return h[0] == ":override" }) {
			t.Fatalf("the override went upstream as a header: %v", first.headers)
		}
		seen[first.addr] = true
	}
	if len(seen) < 2 {
		t.Errorf("30 keys went to %d replica(s): the table names one", len(seen))
	}
	keyless, err := e.routeRequest(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	keyless.release()
	if keyless.override != "" {
		t.Errorf("a request without a key got override %q", keyless.override)
	}
}

// Where a pool's routes carry different metadata (an adapter's pick
// table on its route), a filter reads the metadata of the route that the
// headers match when it first asks, after the filters before it changed
// them, as Envoy re-resolves the route once a Lua filter changes headers.
func TestLuaDriverRouteMetadata(t *testing.T) {
	requireLuaJIT(t)
	md := func(who string) *corev3.Metadata {
		return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"b": {Fields: map[string]*structpb.Value{"who": structpb.NewStringValue(who)}}}}
	}
	match := func(name, exact string) *routev3.RouteMatch {
		h := &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
		if exact != "" {
			h.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: exact}}}
		}
		return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routev3.HeaderMatcher{h}}
	}
	rc := &routev3.RouteConfiguration{Name: "bench", VirtualHosts: []*routev3.VirtualHost{{Routes: []*routev3.Route{
		{Match: match("x-kvxds-adapter", "sql"), Metadata: md("sql")},
		{Match: match("x-session-id", ""), Metadata: md("session")},
		{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}, Metadata: md("any")},
	}}}}
	b, err := routeFilterMetadata(rc, "b")
	if err != nil {
		t.Fatal(err)
	}
	fs := []luaSpec{
		// The first filter names the adapter from x-model, as the body
		// keys filter does from the body.
		{name: "a", metadata: "{}", source: `function envoy_on_request(h)
  local m = h:headers():get("x-model")
  if m ~= nil then h:headers():replace("x-kvxds-adapter", m) end
end`},
		{name: "b", metadata: b, source: `function envoy_on_request(h)
  h:headers():replace("x-who", h:metadata():get("who") or "none")
end`},
	}
	l, err := startLua(fs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	for _, tc := range []struct {
		hdrs [][2]string
		want string
	}{
		{[][2]string{{"x-model", "sql"}, {"x-session-id", "s"}}, "sql"},
		{[][2]string{{"x-model", "other"}, {"x-session-id", "s"}}, "session"},
		{nil, "any"},
	} {
		got, _, err := l.run(fs, tc.hdrs, nil)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(got, func(h [2]string) bool { return h[0] == "x-who" })
		if i < 0 || got[i][1] != tc.want {
			t.Errorf("%v: headers %v, want x-who=%s", tc.hdrs, got, tc.want)
		}
	}
	// Metadata alike on every route is sent as it is.
	rc.VirtualHosts[0].Routes[0].Metadata = md("any")
	rc.VirtualHosts[0].Routes[1].Metadata = md("any")
	if b, err := routeFilterMetadata(rc, "b"); err != nil || strings.Contains(b, "__routes") {
		t.Errorf("same metadata: %s, %v", b, err)
	}
}
