package sim

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

// testEngine drives an engine in pure simulated time, without a replica.
type testEngine struct {
	*engine
	t *testing.T
	// onPlan sees every planned step.
	onPlan func(batch []work)
	// skipChecks skips the O(capacity) cache invariant check per step.
	skipChecks bool
}

func newTestEngine(t *testing.T, cfg Config) *testEngine {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	return &testEngine{engine: newEngine(cfg, newMetrics(cfg, nil)), t: t}
}

// add enqueues a prompt arriving at the engine's current time.
func (e *testEngine) add(prompt []int, maxTokens int) *request {
	return e.addAt(prompt, maxTokens, e.now)
}

func (e *testEngine) addAt(prompt []int, maxTokens int, at float64) *request {
	bs := e.cfg.BlockSize
	if !e.fits(len(prompt), maxTokens) {
		e.t.Fatalf("request of %d+%d tokens does not fit", len(prompt), maxTokens)
	}
	q := &request{
		tokens:    append(make([]int, 0, len(prompt)+maxTokens), prompt...),
		hashes:    AppendBlockHashes(nil, prompt, bs),
		promptLen: len(prompt),
		maxTokens: maxTokens,
		seed:      promptSeed(prompt),
		arrival:   at,
		out:       newOutput(len(prompt)),
	}
	e.enqueue(q)
	return q
}

// run steps the engine until it is idle and returns the number of steps.
func (e *testEngine) run() int {
	steps := 0
	for e.plan() {
		if e.onPlan != nil {
			e.onPlan(e.batch)
		}
		e.complete()
		if !e.skipChecks {
			checkInvariants(e.t, e.cache)
		}
		steps++
		if steps > 1e6 {
			e.t.Fatal("engine does not terminate")
		}
	}
	return steps
}

func (q *request) result(t *testing.T) (result, []uint8) {
	t.Helper()
	q.out.mu.Lock()
	defer q.out.mu.Unlock()
	if !q.out.done || q.out.err != nil {
		t.Fatalf("request not finished cleanly: done=%v err=%v", q.out.done, q.out.err)
	}
	return q.out.result(), append([]uint8(nil), q.out.words...)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestEngineSecondIdenticalPromptHitsAndHasLowerTTFT(t *testing.T) {
	e := newTestEngine(t, Config{})
	prompt := Tokenize(longText(1000))
	if len(prompt) != 1000 {
		t.Fatalf("prompt has %d tokens", len(prompt))
	}
	first := e.add(prompt, 8)
	e.run()
	second := e.add(prompt, 8)
	e.run()
	r1, w1 := first.result(t)
	r2, w2 := second.result(t)

	if r1.CachedTokens != 0 {
		t.Errorf("first request hit %d tokens", r1.CachedTokens)
	}
	// 999 tokens may hit (never the last), in full blocks: 62 × 16.
	if r2.CachedTokens != 992 {
		t.Errorf("second request hit %d tokens, want 992", r2.CachedTokens)
	}
	cfg := e.cfg
	if want := cfg.stepSeconds(1000, 0); !near(r1.TTFT, want) {
		t.Errorf("first TTFT %v, want one step with 1000 prefill tokens = %v", r1.TTFT, want)
	}
	if want := cfg.stepSeconds(8, 0); !near(r2.TTFT, want) {
		t.Errorf("second TTFT %v, want one step with 8 prefill tokens = %v", r2.TTFT, want)
	}
	if !(r2.TTFT < r1.TTFT) {
		t.Errorf("prefix hit did not lower TTFT: %v vs %v", r2.TTFT, r1.TTFT)
	}
	if string(w1) != string(w2) || len(w1) != 8 {
		t.Errorf("same prompt generated different output: %v vs %v", w1, w2)
	}
	s := e.snapshot()
	if s.PrefixQueries != 2000 || s.PrefixHits != 992 || s.PromptTokens != 2000 || s.GenerationTokens != 16 || s.RequestsDone != 2 {
		t.Errorf("stats %+v", s)
	}
}

func TestEngineFullyCachedPromptRecomputesLastBlock(t *testing.T) {
	e := newTestEngine(t, Config{})
	prompt := seq(7, 32) // exactly two blocks
	e.add(prompt, 1)
	e.run()
	q := e.add(prompt, 1)
	e.run()
	if r, _ := q.result(t); r.CachedTokens != 16 {
		t.Errorf("hit %d tokens, want 16: the block holding the last token is recomputed", r.CachedTokens)
	}
}

func TestEngineChunkedPrefillRespectsTokenBudget(t *testing.T) {
	cfg := Config{TokenBudget: 64}
	e := newTestEngine(t, cfg)
	e.onPlan = func(batch []work) {
		total := 0
		for _, w := range batch {
			total += w.tokens
		}
		if total > 64 {
			t.Fatalf("step scheduled %d tokens, budget 64", total)
		}
	}
	long := e.add(seq(1, 300), 4)
	short := e.add(seq(5000, 10), 4)
	e.run()
	// 300 tokens in chunks of 64, 64, 64, 64, 44: five steps. The short
	// request waits behind the head's chunks (FCFS) and is admitted into the
	// 20 tokens of budget left in the fifth step.
	want := 5*e.cfg.DecodeStepBase.Seconds() + 310/e.cfg.PrefillTokensPerSec
	rl, _ := long.result(t)
	rs, _ := short.result(t)
	if !near(rl.TTFT, want) || !near(rs.TTFT, want) {
		t.Errorf("TTFT long %v short %v, want both %v (5 chunked steps)", rl.TTFT, rs.TTFT, want)
	}
}

func TestEnginePreemptsWhenKVRunsOut(t *testing.T) {
	// 10 blocks of 4 tokens; each request grows to ceil((8+12-1)/4) = 5 blocks.
	cfg := Config{BlockSize: 4, KVBlocks: 10}
	e := newTestEngine(t, cfg)
	var qs []*request
	for i := 0; i < 3; i++ {
		qs = append(qs, e.add(seq(100*i+1, 8), 12))
	}
	maxUsage := 0.0
	e.onPlan = func([]work) { maxUsage = max(maxUsage, e.cache.Usage()) }
	e.run()
	s := e.snapshot()
	if s.Preemptions == 0 {
		t.Fatal("no preemption although the requests need 15 of 10 blocks")
	}
	if got := counterValue(t, e.m.preemptions); got != float64(s.Preemptions) {
		t.Errorf("vllm:num_preemptions_total %v, stats %d", got, s.Preemptions)
	}
	if maxUsage > 1 {
		t.Errorf("usage %v above 1", maxUsage)
	}
	for i, q := range qs {
		_, words := q.result(t)
		if len(words) != 12 {
			t.Errorf("request %d generated %d tokens", i, len(words))
		}
		if want := OutputText(seq(100*i+1, 8), 12); wordsText(words) != want {
			t.Errorf("request %d output changed by preemption", i)
		}
	}
	// First admissions only in the exported counters.
	if s.PrefixQueries != 24 {
		t.Errorf("prefix queries %d, want 24 (3 prompts of 8, re-admissions excluded)", s.PrefixQueries)
	}
	if s.PreemptedQueries == 0 {
		t.Error("re-admissions after preemption were not counted apart")
	}
	if s.Running != 0 || s.Waiting != 0 || e.cache.FreeBlocks() != 10 {
		t.Errorf("engine not drained: %+v free %d", s, e.cache.FreeBlocks())
	}
}

func TestEnginePreemptsMostRecentlyAdmitted(t *testing.T) {
	cfg := Config{BlockSize: 4, KVBlocks: 6}
	e := newTestEngine(t, cfg)
	a := e.add(seq(1, 7), 10)   // admitted first
	b := e.add(seq(100, 7), 10) // admitted second
	var victim *request
	e.onPlan = func([]work) {
		if victim == nil && e.stats.Preemptions > 0 {
			victim = e.waiting[0]
		}
	}
	e.run()
	if victim != b {
		t.Errorf("preempted %p, want the later request b %p (a is %p)", victim, b, a)
	}
}

func TestEngineRespectsMaxRunning(t *testing.T) {
	e := newTestEngine(t, Config{MaxRunning: 3})
	for i := 0; i < 10; i++ {
		e.add(seq(50*i, 20), 5)
	}
	e.onPlan = func([]work) {
		if len(e.running) > 3 {
			t.Fatalf("%d running, max 3", len(e.running))
		}
	}
	e.run()
	if s := e.snapshot(); s.RequestsDone != 10 {
		t.Errorf("done %d", s.RequestsDone)
	}
}

func TestEngineMultiTurnHitsPreviousReply(t *testing.T) {
	e := newTestEngine(t, Config{})
	msgs := []Message{{Role: "system", Content: longText(200)}, {Role: "user", Content: "first question about caches"}}
	p1 := Tokenize(RenderChat(msgs))
	q1 := e.add(p1, 40)
	e.run()
	_, words := q1.result(t)
	msgs = append(msgs, Message{Role: "assistant", Content: wordsText(words)}, Message{Role: "user", Content: "and a follow-up"})
	p2 := Tokenize(RenderChat(msgs))
	q2 := e.add(p2, 4)
	e.run()
	r2, _ := q2.result(t)
	// Turn 2 repeats turn 1's prompt and reply; all their computed full
	// blocks (the reply's last token never had KV) are hits.
	computed := len(p1) + 40 - 1
	if want := computed / 16 * 16; r2.CachedTokens != want {
		t.Errorf("turn 2 hit %d tokens, want %d (prompt %d + reply 40)", r2.CachedTokens, want, len(p1))
	}
}

func TestEngineWaitsForArrival(t *testing.T) {
	e := newTestEngine(t, Config{})
	q := e.addAt(seq(1, 10), 2, 5.0)
	e.run()
	r, _ := q.result(t)
	if !near(r.TTFT, e.cfg.stepSeconds(10, 0)) {
		t.Errorf("TTFT %v counts idle time before arrival", r.TTFT)
	}
	if e.now < 5 {
		t.Errorf("engine ran a request before it arrived: now %v", e.now)
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	d := DefaultConfig()
	if c != d {
		t.Errorf("zero config with defaults %+v != DefaultConfig %+v", c, d)
	}
	if d.BlockSize != 16 || d.KVBlocks != 29000 || d.MaxRunning != 256 || d.TokenBudget != 8192 ||
		d.PrefillTokensPerSec != 10000 || d.DecodeStepBase != 12*time.Millisecond || d.DecodePerSeq != 50*time.Microsecond || d.TimeScale != 1 {
		t.Errorf("defaults changed: %+v", d)
	}
	for _, bad := range []Config{{BlockSize: -1}, {TimeScale: -2}, {PrefillTokensPerSec: -1}} {
		if err := bad.withDefaults().validate(); err == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

func wordsText(words []uint8) string {
	var b []byte
	for _, w := range words {
		b = append(b, ' ')
		b = append(b, outputWords[w]...)
	}
	return string(b)
}

// longText is n distinct words, one token each.
func longText(n int) string {
	b := make([]byte, 0, n*8)
	for i := 0; i < n; i++ {
		b = append(b, 'w')
		b = appendInt(b, i)
		b = append(b, ' ')
	}
	return string(b)
}

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}
