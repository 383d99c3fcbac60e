package bench

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/test/sim"
	"github.com/kvxds/kvxds/test/workload"
)

// llm-d's lora-affinity scores, and vLLM's in-flight list in both labels
// counting twice against max_lora.
func TestLoRAAffinity(t *testing.T) {
	for _, tc := range []struct {
		name  string
		s     LoRAState
		model string
		want  float64
	}{
		{"running", LoRAState{Running: []string{"a", "b"}, Waiting: []string{"a", "b"}, MaxLoRA: 4}, "a", 1},
		{"a free slot", LoRAState{Running: []string{"b"}, Waiting: []string{"b"}, MaxLoRA: 4}, "a", 0.8},
		{"in flight twice fills the slots", LoRAState{Running: []string{"b", "c"}, Waiting: []string{"b", "c"}, MaxLoRA: 4}, "a", 0},
		{"waiting only", LoRAState{Running: []string{"b", "c"}, Waiting: []string{"a"}, MaxLoRA: 3}, "a", 0.6},
		{"idle replica", LoRAState{MaxLoRA: 1}, "a", 0.8},
		{"the base model is never running", LoRAState{Running: []string{"b"}, Waiting: []string{"b"}, MaxLoRA: 1}, "base", 0},
	} {
		if got := loraAffinity(tc.s, tc.model); got != tc.want {
			t.Errorf("%s: %g, want %g", tc.name, got, tc.want)
		}
	}
}

// The lora-affinity scorer breaks a tie toward the replica running the
// request's adapter, outweighs a small queue difference at weight 1, and
// is absent from llm-d's default profile.
func TestLLMDRouterLoRA(t *testing.T) {
	states := []LoRAState{
		{Running: []string{"x", "y"}, Waiting: []string{"x", "y"}, MaxLoRA: 4},
		{Running: []string{"a", "y"}, Waiting: []string{"a", "y"}, MaxLoRA: 4},
		{MaxLoRA: 4},
	}
	read := func(i int) LoRAState { return states[i] }
	cfg := DefaultLLMDConfig()
	cfg.LoRAWeight = DefaultLLMDLoRAWeight
	x, f := newFakeLLMD(3, cfg)
	x.WithLoRA(read)
	if got := x.PickModel("prompt one", "a"); got != 1 {
		t.Errorf("adapter a went to replica %d, want 1 (running it)", got)
	}
	// Replica 1 waits on 1 more request than replica 2 of 0..1: queue
	// 2×0 + lora 1 = 1 against 2×1 + 0.8 = 2.8: the free slot wins.
	f.waiting[0], f.waiting[1], f.waiting[2] = 1, 1, 0
	if got := x.PickModel("prompt two", "a"); got != 2 {
		t.Errorf("adapter a went to replica %d, want 2 (a free slot, a shorter queue)", got)
	}
	// Without the scorer the equal replicas take turns.
	y, _ := newFakeLLMD(3, DefaultLLMDConfig())
	y.WithLoRA(read)
	got := []int{y.PickModel("p1", "a"), y.PickModel("p2", "a"), y.PickModel("p3", "a")}
	if slices.Sorted(slices.Values(got))[0] != 0 || len(slices.Compact(slices.Sorted(slices.Values(got)))) != 3 {
		t.Errorf("weight 0 picked %v, want each replica in turn", got)
	}
	// The model starts the hash chain: one prompt under two models shares
	// no block.
	if a, b := x.blockHashes(block('p'), "a"), x.blockHashes(block('p'), "b"); a[0] == b[0] {
		t.Error("one block hashes alike under two models")
	}
}

// A replica's vllm:lora_requests_info, read as llm-d reads it, is what
// the replica's Stats say (which IndexLLMDLoRA reads live), and a request
// under an adapter costs one swap-in, which ScrapeEngine counts.
func TestLoRAInfoScrape(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.KVBlocks, cfg.MaxLoRA, cfg.TimeScale = 200, 2, 1
	cfg.DecodePerSeq = 20 * time.Millisecond // a slow stream: in flight while scraped
	r, err := sim.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &Request{Request: workload.Request{Prompt: "one two three", MaxTokens: 40, Adapter: "adapter-3"}}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.Addr()+"/v1/completions", bytes.NewReader(completionsBody(req)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil { // streaming: the request runs
		t.Fatal(err)
	}
	// The engine records the gauge at the end of each step, after the
	// step's tokens went out (as vLLM records its stats): the first token
	// may be read before the first record, so the first scrape waits.
	scrape := func() LoRAState {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mresp, err := http.Get("http://" + r.Addr() + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			parser := expfmt.NewTextParser(model.LegacyValidation)
			fams, err := parser.TextToMetricFamilies(mresp.Body)
			mresp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			s, ok, err := LoRAInfo(fams)
			if err != nil || !ok && time.Now().After(deadline) {
				t.Fatalf("LoRAInfo: %v, %v", ok, err)
			}
			if ok {
				return s
			}
		}
	}
	s, st := scrape(), r.Stats()
	if !slices.Equal(s.Running, []string{"adapter-3"}) || !slices.Equal(s.Waiting, s.Running) || s.MaxLoRA != 2 {
		t.Errorf("in flight: scraped %+v", s)
	}
	if !slices.Equal(st.LoRAInFlight, s.Running) || st.MaxLoRA != s.MaxLoRA {
		t.Errorf("Stats say %v of %d, the page %v of %d", st.LoRAInFlight, st.MaxLoRA, s.Running, s.MaxLoRA)
	}
	io.Copy(io.Discard, resp.Body)
	// The newest series wins once the request is done: none in flight.
	deadline := time.Now().Add(10 * time.Second)
	for s = scrape(); len(s.Running) > 0 && time.Now().Before(deadline); s = scrape() {
		time.Sleep(20 * time.Millisecond)
	}
	if len(s.Running) != 0 || len(r.Stats().LoRAInFlight) != 0 {
		t.Errorf("done: scraped %+v, Stats %v", s, r.Stats().LoRAInFlight)
	}
	c, err := ScrapeEngine(ctx, httpClient(), r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if c.LoRASwapIns != 1 {
		t.Errorf("%g swap-ins, want 1", c.LoRASwapIns)
	}
}

// The adapters mode's policy is valid, places adapters with the engines'
// slots and the bench's base model, and divides its durations by the time
// scale.
func TestAdaptersBlock(t *testing.T) {
	text, err := Policy(PolicyOptions{Mode: KVXDSAdapters, Endpoints: []string{"127.0.0.1:8001"}, TimeScale: 5, MaxLoRA: 3})
	if err != nil {
		t.Fatal(err)
	}
	p, diags := policy.Parse([]byte(text), "adapters.hcl")
	if diags.HasErrors() {
		t.Fatalf("%s\n%s", policy.Format(diags), text)
	}
	a := p.Pools[0].LoRA
	if a == nil {
		t.Fatalf("no adapters:\n%s", text)
	}
	if a.MaxLoRA != 3 || !slices.Equal(a.BaseModels, []string{chatModel}) || a.Interval != 2*time.Second || a.HalfLife != 12*time.Second {
		t.Errorf("adapters %+v", *a)
	}
	if !strings.Contains(text, DeployedBlocks(5)) {
		t.Errorf("the adapters mode lacks the deployed blocks:\n%s", text)
	}
}

// On the Envoy data plane, the served Lua filter names a request's adapter
// in x-kvxds-adapter from the chat body's model, a base-model request
// gets none, and a placed adapter's requests go to its replica: by
// default (the pool bounds prompt bytes) the pick filter makes it the
// request's upstream host in the pool's cluster; with Envoy's own bound
// (balance_on = "requests") the request takes the adapter's cluster.
func TestEnvoyAdapterHeader(t *testing.T) {
	requireLuaJIT(t)
	for _, on := range []string{"", fleet.BalanceOnRequests} {
		t.Run(cmp.Or(on, "default"), func(t *testing.T) { testEnvoyAdapterHeader(t, on) })
	}
}

func testEnvoyAdapterHeader(t *testing.T, on string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reps, addrs := startTestFleet(t, 3)
	pol, err := Policy(PolicyOptions{Mode: KVXDSAdapters, Endpoints: addrs, TimeScale: 10, Scrape: time.Second, MaxLoRA: 2, BalanceOn: on, BalanceFactor: 200})
	if err != nil {
		t.Fatal(err)
	}
	// Always placed: the cluster exists without demand.
	pol = strings.Replace(pol, "  adapters {\n", "  adapters {\n    adapters = [\"adapter-3\"]\n", 1)
	k, e := kvxdsWithEnvoy(ctx, t, pol, "lora-test", KVXDSAdapters, addrs)
	defer k.stop()
	// Where the placement put adapter-3.
	var member string
	for deadline := time.Now().Add(20 * time.Second); member == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, p := range k.ctrl.Status().Pools {
			if p.Adapters == nil {
				continue
			}
			for _, a := range p.Adapters.Adapters {
				if a.Name == "adapter-3" && len(a.Members) == 1 && a.Stage == "" {
					member = a.Members[0].Identity
				}
			}
		}
	}
	if member == "" {
		t.Fatal("adapter-3 was not placed and routed on one replica")
	}
	for _, p := range k.ctrl.Fleet().Pools {
		for _, ep := range p.Endpoints {
			if ep.Identity() == member {
				member = ep.Address()
			}
		}
	}
	under := &Request{Request: workload.Request{Session: "s1", Prompt: "one two three", MaxTokens: 2, Adapter: "adapter-3"}}
	base := &Request{Request: workload.Request{Session: "s2", Prompt: "one two three", MaxTokens: 2}}
	placed := func(rt routing) bool {
		if on == "" {
			return rt.cluster == PoolName && rt.override == member
		}
		return rt.cluster == PoolName+"/adapter/adapter-3"
	}
	var rt routing
	for deadline := time.Now().Add(20 * time.Second); ; {
		if rt, err = e.routeRequest([][2]string{{SessionHeader, "s1"}}, KeyBody(under)); err != nil {
			t.Fatal(err)
		}
		rt.release()
		if placed(rt) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Contains(rt.headers, [2]string{sim.MDAdapter, "adapter-3"}) {
		t.Errorf("adapter request: headers %v, want %s = adapter-3", rt.headers, sim.MDAdapter)
	}
	if !placed(rt) {
		t.Errorf("adapter request took cluster %q (upstream host %q); adapter-3 is on %s", rt.cluster, rt.override, member)
	}
	rb, err := e.routeRequest([][2]string{{SessionHeader, "s2"}}, KeyBody(base))
	if err != nil {
		t.Fatal(err)
	}
	rb.release()
	for _, h := range rb.headers {
		if strings.HasPrefix(h[0], sim.MDAdapter) {
			t.Errorf("base-model request: header %v", h)
		}
	}
	if strings.Contains(rb.cluster, "adapter") {
		t.Errorf("base-model request took cluster %q", rb.cluster)
	}
	// The engine runs the request under its adapter: one swap-in.
	if res := e.send(ctx, under, time.Now(), false); res.Err != nil || res.Tokens != 2 {
		t.Fatalf("streamed %+v", res)
	}
	var swaps int64
	for _, r := range reps {
		swaps += r.Stats().LoRASwapIns
	}
	if swaps != 1 {
		t.Errorf("%d swap-ins, want 1", swaps)
	}
	note, err := adapterPlacement(ctx, k.http, k.ctrl.AdminAddr(), len(reps), 2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(note, "placed 1 adapters on 1 replica places (the fleet has 3 × 2 = 6 slots), 0 of them in the tail") {
		t.Errorf("placement note: %s", note)
	}
}
