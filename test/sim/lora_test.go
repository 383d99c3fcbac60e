package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/kvxds/kvxds/weights"
)

// addAdapter enqueues a prompt under an adapter at the engine's current time.
func (e *testEngine) addAdapter(adapter string, prompt []int, maxTokens int) *request {
	return e.addAdapterAt(adapter, prompt, maxTokens, e.now)
}

func (e *testEngine) addAdapterAt(adapter string, prompt []int, maxTokens int, at float64) *request {
	root := AdapterRoot(adapter)
	q := &request{
		tokens:    append(make([]int, 0, len(prompt)+maxTokens), prompt...),
		hashes:    AppendAdapterBlockHashes(nil, root, prompt, e.cfg.BlockSize),
		promptLen: len(prompt),
		maxTokens: maxTokens,
		seed:      promptSeed(prompt),
		adapter:   adapter,
		root:      root,
		arrival:   at,
		out:       newOutput(len(prompt)),
	}
	e.enqueue(q)
	return q
}

// Requests one after another, each to completion: what each costs, what
// stays loaded and what is evicted.
func TestLoRASlots(t *testing.T) {
	load := DefaultConfig().AdapterLoad.Seconds()
	one := DefaultConfig().stepSeconds(100, 0) // a cold 100-token prompt, one output token
	tests := []struct {
		name      string
		maxLoRA   int
		adapters  []string  // one request each, in order, distinct prompts
		ttft      []float64 // each request's TTFT
		swapIns   int64
		evictions int64
		loaded    []string
	}{
		{"base model loads nothing", 2, []string{"", ""}, []float64{one, one}, 0, 0, []string{}},
		{"first use pays the swap-in", 2, []string{"a"}, []float64{one + load}, 1, 0, []string{"a"}},
		{"a loaded adapter costs nothing", 2, []string{"a", "a"}, []float64{one + load, one}, 1, 0, []string{"a"}},
		{"a free slot loads without eviction", 2, []string{"a", "b"}, []float64{one + load, one + load}, 2, 0, []string{"a", "b"}},
		// a, b fill both slots; a again makes b the least recently used;
		// c evicts b; b comes back and evicts a (c is newer).
		{"LRU eviction", 2, []string{"a", "b", "a", "c", "b"},
			[]float64{one + load, one + load, one, one + load, one + load}, 4, 2, []string{"b", "c"}},
		{"one slot swaps every time", 1, []string{"a", "b", "a"},
			[]float64{one + load, one + load, one + load}, 3, 2, []string{"a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, Config{MaxLoRA: tc.maxLoRA})
			for i, a := range tc.adapters {
				q := e.addAdapter(a, seq(1000*(i+1), 100), 1)
				e.run()
				res, _ := q.result(t)
				if !near(res.TTFT, tc.ttft[i]) {
					t.Errorf("request %d (%q): TTFT %v, want %v", i, a, res.TTFT, tc.ttft[i])
				}
			}
			s := e.snapshot()
			if s.LoRASwapIns != tc.swapIns || s.LoRAEvictions != tc.evictions {
				t.Errorf("swap-ins %d, evictions %d; want %d, %d", s.LoRASwapIns, s.LoRAEvictions, tc.swapIns, tc.evictions)
			}
			if !reflect.DeepEqual(s.LoRALoaded, tc.loaded) {
				t.Errorf("loaded %v, want %v", s.LoRALoaded, tc.loaded)
			}
			if got := counterValue(t, e.m.loraSwapIns); got != float64(tc.swapIns) {
				t.Errorf("%s = %v", MetricLoRASwapIns, got)
			}
			if got := counterValue(t, e.m.loraEvictions); got != float64(tc.evictions) {
				t.Errorf("%s = %v", MetricLoRAEvictions, got)
			}
		})
	}
}

// With every slot held by an adapter with a running request, a request
// under another adapter waits, and requests behind it that can run do.
func TestLoRABusySlotsWait(t *testing.T) {
	e := newTestEngine(t, Config{MaxLoRA: 1})
	long := e.addAdapter("a", seq(1000, 64), 50)
	blocked := e.addAdapter("b", seq(2000, 64), 1)
	base := e.addAdapter("", seq(3000, 64), 1)
	same := e.addAdapter("a", seq(4000, 64), 1)

	var admittedB float64 = -1
	e.onPlan = func(batch []work) {
		for _, w := range batch {
			if w.r == blocked && admittedB < 0 {
				admittedB = e.now
			}
		}
	}
	e.run()
	rl, _ := long.result(t)
	rb, _ := blocked.result(t)
	rbase, _ := base.result(t)
	rsame, _ := same.result(t)
	// a's long request finishes after 50 tokens; b is admitted only then.
	finishA := rl.TTFT + 49*DefaultConfig().stepSeconds(0, 1) // a lower bound: decode steps with one sequence
	if admittedB < finishA-1e-9 {
		t.Errorf("b admitted at %v, before a's request finished (≥ %v)", admittedB, finishA)
	}
	// The base request and a's second request did not wait for b.
	if !(rbase.TTFT < rl.TTFT+0.1) || !(rsame.TTFT < rl.TTFT+0.1) {
		t.Errorf("requests behind the blocked one waited: base %v, same adapter %v, first %v", rbase.TTFT, rsame.TTFT, rl.TTFT)
	}
	if !(rb.TTFT > finishA) {
		t.Errorf("b's TTFT %v, want after a finished (%v)", rb.TTFT, finishA)
	}
	if s := e.snapshot(); s.LoRASwapIns != 2 || s.LoRAEvictions != 1 || !slices.Equal(s.LoRALoaded, []string{"b"}) {
		t.Errorf("swap-ins %d evictions %d loaded %v", s.LoRASwapIns, s.LoRAEvictions, s.LoRALoaded)
	}
	// b alone waited for a slot: from its first step, passed over, to
	// its admission.
	if s := e.snapshot(); s.LoRASlotWaits != 1 || !(s.LoRASlotWaitSeconds > 0.9*admittedB && s.LoRASlotWaitSeconds <= admittedB+1e-9) {
		t.Errorf("slot waits %d of %v s; want 1 of about %v s", s.LoRASlotWaits, s.LoRASlotWaitSeconds, admittedB)
	}
}

// The same tokens under different adapters share no KV block.
func TestLoRAPrefixCachePerAdapter(t *testing.T) {
	e := newTestEngine(t, Config{})
	prompt := seq(1, 500)
	hits := func(adapter string) int {
		q := e.addAdapter(adapter, prompt, 1)
		e.run()
		res, _ := q.result(t)
		return res.CachedTokens
	}
	for _, step := range []struct {
		adapter string
		want    int
	}{
		{"", 0},
		{"a", 0},   // base blocks do not serve a
		{"b", 0},   // nor a's blocks b
		{"a", 496}, // a's own blocks do (never the last token: 31 × 16)
		{"", 496},
		{"b", 496},
	} {
		if got := hits(step.adapter); got != step.want {
			t.Errorf("under %q: %d cached tokens, want %d", step.adapter, got, step.want)
		}
	}
	if AdapterRoot("") != rootHash || AdapterRoot("a") == AdapterRoot("b") || AdapterRoot("a") == rootHash {
		t.Error("adapter roots collide")
	}
	// The offline cache keys blocks by adapter too.
	c := NewCache(100, 16)
	c.InsertAdapter("a", prompt)
	if c.Lookup(prompt) != 0 || c.LookupAdapter("b", prompt) != 0 || c.LookupAdapter("a", prompt) != 496 {
		t.Error("offline cache shares blocks across adapters")
	}
}

// A preempted request gives up its slot; its adapter stays loaded.
func TestLoRAPreemptionReleasesTheSlot(t *testing.T) {
	e := newTestEngine(t, Config{MaxLoRA: 2, KVBlocks: 12, BlockSize: 16, TokenBudget: 1000})
	a := e.addAdapter("a", seq(1000, 90), 60)
	b := e.addAdapter("b", seq(2000, 90), 60)
	e.run()
	a.result(t)
	b.result(t)
	s := e.snapshot()
	if s.Preemptions == 0 {
		t.Fatal("no preemption: the test's KV pool is too large")
	}
	for name, slot := range e.lora.loaded {
		if slot.running != 0 {
			t.Errorf("adapter %s holds %d running requests when idle", name, slot.running)
		}
	}
	if len(e.lora.inflight) != 0 || len(e.lora.inflightN) != 0 {
		t.Errorf("in flight when idle: %v %v", e.lora.inflight, e.lora.inflightN)
	}
}

// vllm:lora_requests_info over real HTTP and gRPC, read by kvxds' own
// parser: the adapters in flight in both lists, in order of arrival, the
// newest series the current one, and the simulator's swap-in counter.
func TestLoRAMetricsOverHTTPAndGRPC(t *testing.T) {
	r := startReplica(t, Config{ID: "replica-t", TimeScale: 20, MaxLoRA: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Streams that last: 2,000 tokens at ≥ 12 ms each is ≥ 1.2 s of wall time.
	httpStream := func(model string) (cancel func()) {
		c, stop := context.WithCancel(ctx)
		b, _ := json.Marshal(map[string]any{"model": model, "prompt": longText(50), "max_tokens": 2000, "stream": true})
		req, _ := http.NewRequestWithContext(c, http.MethodPost, "http://"+r.Addr()+"/v1/completions", bytesReader(b))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		buf := make([]byte, 1)
		if _, err := resp.Body.Read(buf); err != nil { // the first token
			t.Fatal(err)
		}
		go func() { io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
		return stop
	}
	grpcStream := func(adapter string) (cancel func()) {
		c, stop := context.WithCancel(ctx)
		c = metadata.AppendToOutgoingContext(c, MDAdapter, adapter)
		body, _ := json.Marshal(GenerateRequest{Prompt: longText(50), MaxTokens: 2000})
		stream, err := testpb.NewTestServiceClient(dialGRPC(t, r.Addr())).StreamingOutputCall(c,
			&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				if _, err := stream.Recv(); err != nil {
					return
				}
			}
		}()
		return stop
	}
	scrape := func() *weights.Adapters {
		resp, err := http.Get("http://" + r.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		p, _ := weights.BuiltinProfile(weights.EngineVLLM)
		s, err := weights.ParseSignals(p, "", body, resp.Header.Get("Content-Type"))
		if err != nil {
			t.Fatal(err)
		}
		return s.Adapters
	}

	stopSQL := httpStream("sql-lora")
	stopChat := grpcStream("chat-lora")
	stopBase := httpStream("") // the base model is no adapter
	a := scrape()
	want := []string{"sql-lora", "chat-lora"} // vLLM's order: first arrival
	if a == nil || a.MaxLoRA != 3 || a.Overfull || !slices.Equal(sortedCopy(a.Running), sortedCopy(want)) ||
		!slices.Equal(a.Running, a.Waiting) {
		t.Fatalf("adapters %+v, want %v in both lists", a, want)
	}
	if time.Since(a.Observed) > 5*time.Second || a.Observed.After(time.Now().Add(time.Second)) {
		t.Errorf("observed %v, now %v", a.Observed, time.Now())
	}
	stopSQL()
	waitFor(t, func() bool { a := scrape(); return a != nil && slices.Equal(a.Running, []string{"chat-lora"}) })
	stopChat()
	stopBase()
	waitFor(t, func() bool { return r.Stats().Running == 0 && r.Stats().Waiting == 0 })
	if s := r.Stats(); s.LoRASwapIns != 2 || !slices.Equal(s.LoRALoaded, []string{"chat-lora", "sql-lora"}) {
		t.Errorf("swap-ins %d, loaded %v", s.LoRASwapIns, s.LoRALoaded)
	}
	// The raw page: the series vLLM would print, labels in its order.
	resp, err := http.Get("http://" + r.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	for _, line := range []string{
		`vllm:lora_requests_info{max_lora="3",running_lora_adapters="sql-lora,chat-lora",waiting_lora_adapters="sql-lora,chat-lora"}`,
		`vllm:lora_requests_info{max_lora="3",running_lora_adapters="chat-lora",waiting_lora_adapters="chat-lora"}`,
		`sim:lora_swap_ins_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2`,
	} {
		if !containsLine(string(page), line) {
			t.Errorf("page lacks %s", line)
		}
	}
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func sortedCopy(s []string) []string { return slices.Sorted(slices.Values(s)) }

// containsLine reports whether page has a line starting with prefix.
func containsLine(page, prefix string) bool {
	for line := range strings.Lines(page) {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}
