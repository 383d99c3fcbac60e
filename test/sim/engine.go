package sim

import (
	"errors"
	"slices"
	"sync"
)

type reqState uint8

const (
	stateWaiting reqState = iota
	stateRunning
	stateDone
)

// request is one sequence inside the engine. Only the engine touches it
// (under the replica's lock); handlers read its output.
type request struct {
	tokens    []int       // prompt, then generated tokens
	hashes    []BlockHash // chained hashes of the full blocks of tokens
	promptLen int
	maxTokens int
	seed      uint64
	adapter   string    // LoRA adapter, "" for the base model
	root      BlockHash // AdapterRoot(adapter), set with adapter

	arrival float64 // simulated seconds
	// slotWaiting is set when the scheduler passed the request over for
	// want of an adapter slot since its last admission, first at
	// slotWaitFrom.
	slotWaiting  bool
	slotWaitFrom float64
	computed     int  // tokens whose KV is computed or scheduled this step
	prefilled    bool // the current admission's prefill is done: decoding
	generated    int
	lastToken    float64
	admitted     bool // admitted at least once
	preemption   int  // times preempted
	state        reqState
	blocks       SeqBlocks

	// prior is simulated time the request spent before it reached the
	// engine, which its client's TTFT includes: a remote prefill.
	prior float64
	// readyAt is when a remotely prefilled request's KV has arrived: the
	// engine admits it no earlier (0: at once).
	readyAt float64
	// remoteKV marks a request whose prompt KV is all present when it is
	// admitted: its locally cached blocks, held in blocks since its
	// transfer began, and transferred ones, which admission allocates.
	// Only the last prompt token is computed. A preemption clears it.
	remoteKV    bool
	transferred int // prompt tokens whose KV was transferred

	out *output
}

// rootHash is the parent of the request's first block: its adapter's.
func (r *request) rootHash() BlockHash {
	if r.adapter == "" {
		return rootHash
	}
	return r.root
}

// output is what a request's handler sees. The engine appends under mu and
// pokes wake; the handler drains it.
type output struct {
	mu   sync.Mutex
	wake chan struct{}

	words        []uint8 // generated tokens, as indexes into outputWords
	promptTokens int
	cachedTokens int     // prefix hit on first admission
	ttft         float64 // simulated seconds; valid once words is non-empty
	done         bool
	reason       string
	err          error

	pd pdResult // a decode replica's account of the prefill
}

func newOutput(promptTokens int) *output {
	return &output{wake: make(chan struct{}, 1), promptTokens: promptTokens}
}

func (o *output) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// result is a snapshot of an output's per-request facts.
type result struct {
	PromptTokens int
	CachedTokens int
	TTFT         float64 // simulated seconds
	Reason       string  // finish reason once done
	PD           pdResult
}

func (o *output) result() result {
	return result{PromptTokens: o.promptTokens, CachedTokens: o.cachedTokens, TTFT: o.ttft, Reason: o.reason, PD: o.pd}
}

func (o *output) finish(reason string, err error) {
	o.mu.Lock()
	if !o.done {
		o.done, o.reason, o.err = true, reason, err
	}
	o.mu.Unlock()
	o.poke()
}

var errUnschedulable = errors.New("request can never fit in the KV cache")

// work is one request's share of a step.
type work struct {
	r      *request
	tokens int
	decode bool
}

// engine is vLLM V1's scheduler and KV cache manager in simulated time,
// without any notion of wall time: plan a step at now, then complete it at
// now + its duration. The replica paces it against the wall clock.
type engine struct {
	cfg   Config
	cache *Cache
	m     *metrics

	now     float64 // simulated seconds: start of the next step
	stepEnd float64
	waiting []*request // FCFS; preempted requests go back to the front
	running []*request // in admission order; the last is preempted first
	batch   []work     // the planned, not yet completed step
	lora    *loraSlots
	loads   int // swap-ins of the planned step

	// unixAt maps simulated time to the Unix time (seconds) the engine
	// writes into vllm:lora_requests_info; the replica maps it to its
	// wall clock.
	unixAt func(t float64) float64

	stats Stats
}

// simEpoch is the Unix time of simulated time 0 for an engine without a
// wall clock (tests): 2025-01-01.
const simEpoch = 1735689600

func newEngine(cfg Config, m *metrics) *engine {
	return &engine{cfg: cfg, cache: NewCache(cfg.KVBlocks, cfg.BlockSize), m: m,
		lora: newLoRASlots(cfg.MaxLoRA), unixAt: func(t float64) float64 { return simEpoch + t }}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// fits reports whether a request could ever run: all its tokens but the
// last generated one hold KV, and it must fit in the whole pool alone.
func (e *engine) fits(promptLen, maxTokens int) bool {
	return ceilDiv(promptLen+maxTokens-1, e.cfg.BlockSize) <= e.cfg.KVBlocks
}

func (e *engine) enqueue(r *request) {
	e.lora.arrive(r.adapter)
	r.state = stateWaiting
	e.waiting = append(e.waiting, r)
}

// abort removes a request wherever it is (client went away) and frees its
// blocks; a step already planned skips it on completion. It counts as
// vllm:request_success_total{finished_reason="abort"}, the label vLLM V1
// pre-creates for aborted requests (an assumption about when vLLM counts
// them; e2e latency is not observed for aborts).
func (e *engine) abort(r *request) {
	switch r.state {
	case stateWaiting:
		for i, w := range e.waiting {
			if w == r {
				e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
				break
			}
		}
	case stateRunning:
		for i, w := range e.running {
			if w == r {
				e.running = append(e.running[:i], e.running[i+1:]...)
				break
			}
		}
		e.cache.Release(&r.blocks)
		e.lora.release(r.adapter, e.now)
	case stateDone:
		return
	}
	e.lora.leave(r.adapter)
	r.state = stateDone
	e.stats.RequestsAborted++
	e.m.success[finishAbort].Inc()
	r.out.finish(finishAbort, errAborted)
}

var errAborted = errors.New("request aborted")

// fail ends every request with err (replica shutting down).
func (e *engine) fail(err error) {
	for _, r := range e.running {
		e.lora.release(r.adapter, e.now)
	}
	for _, r := range append(e.waiting, e.running...) {
		e.lora.leave(r.adapter)
		e.cache.Release(&r.blocks)
		r.state = stateDone
		r.out.finish(finishAbort, err)
	}
	e.waiting, e.running, e.batch = nil, nil, nil
}

// grow makes r's block table cover n tokens; false if the pool is short.
func (e *engine) grow(r *request, n int) bool {
	need := ceilDiv(n, e.cfg.BlockSize) - r.blocks.Len()
	return need <= 0 || e.cache.Allocate(&r.blocks, need)
}

// publish caches r's full blocks among its first n tokens.
func (e *engine) publish(r *request, n int) {
	e.cache.Publish(&r.blocks, r.hashes[:min(len(r.hashes), n/e.cfg.BlockSize)])
}

// preempt is vLLM V1's recompute preemption: free every block (full ones
// stay cached), forget the computed tokens, and put the request back at the
// front of the waiting queue.
func (e *engine) preempt(r *request) {
	e.cache.Release(&r.blocks)
	e.lora.release(r.adapter, e.now)
	r.computed, r.prefilled = 0, false
	r.remoteKV = false // recomputed locally, hitting what it cached
	r.preemption++
	r.state = stateWaiting
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = r
	e.stats.Preemptions++
	e.m.preemptions.Inc()
}

// plan schedules the step that starts at e.now, following vLLM V1's
// Scheduler.schedule. It returns false when there is nothing to run: no
// running request and no waiting one that has arrived.
func (e *engine) plan() bool {
	for attempt := 0; ; attempt++ {
		if len(e.running) == 0 {
			if len(e.waiting) == 0 {
				return false
			}
			// Idle until the next arrival.
			if a := e.nextEntry(); a > e.now {
				e.now = a
			}
		}
		if e.schedule() {
			return true
		}
		if len(e.running) == 0 && len(e.waiting) > 0 && attempt > 0 {
			// An idle engine could not admit the head: it can never run.
			// (submit rejects such requests; this guards the loop.)
			r := e.waiting[0]
			e.waiting = e.waiting[1:]
			e.lora.leave(r.adapter)
			r.state = stateDone
			r.out.finish(finishAbort, errUnschedulable)
		}
	}
}

// nextEntry is the earliest time a waiting request may be admitted: its
// arrival, or later when its KV is still being transferred.
func (e *engine) nextEntry() float64 {
	t := max(e.waiting[0].arrival, e.waiting[0].readyAt)
	for _, r := range e.waiting[1:] {
		t = min(t, max(r.arrival, r.readyAt))
	}
	return t
}

func (e *engine) schedule() bool {
	bs := e.cfg.BlockSize
	budget := e.cfg.TokenBudget
	e.batch = e.batch[:0]
	e.loads = 0
	preempted := false

	// Running requests first, in admission order: a decode is one token, a
	// partially prefilled request gets the next chunk. If the KV pool cannot
	// hold the new tokens, preempt the most recently admitted request
	// (running.pop()), possibly this one, until it fits.
	for i := 0; i < len(e.running) && budget > 0; {
		r := e.running[i]
		n := min(len(r.tokens)-r.computed, budget)
		for !e.grow(r, r.computed+n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == r {
				r = nil
				break
			}
		}
		if r == nil {
			break
		}
		e.publish(r, r.computed+n)
		e.batch = append(e.batch, work{r: r, tokens: n, decode: r.prefilled})
		budget -= n
		i++
	}

	// Then admit waiting requests FCFS, unless this step preempted (vLLM V1
	// admits nothing in a step that had to preempt). The head blocks the
	// queue: if it does not fit, nothing behind it is admitted either. A
	// request whose adapter can get no slot is passed over (skip) and keeps
	// its place, as vLLM V1 does.
	skip := 0
	for !preempted && budget > 0 && skip < len(e.waiting) && len(e.running) < e.cfg.MaxRunning {
		r := e.waiting[skip]
		if r.arrival > e.now {
			break
		}
		if r.readyAt > e.now {
			// Its KV is still on the way: vLLM keeps such a request
			// aside (WAITING_FOR_REMOTE_KVS) and schedules those behind.
			skip++
			continue
		}
		if !e.lora.canAdmit(r.adapter) {
			if !r.slotWaiting {
				r.slotWaiting, r.slotWaitFrom = true, e.now
			}
			skip++
			continue
		}
		var hit, unrefHits, computed int
		if r.remoteKV {
			// The prompt's KV is all here: the blocks it held from its
			// own cache and the transferred ones. vLLM still recomputes
			// the last prompt token for its logits
			// (_update_waiting_for_remote_kv: num_tokens - 1).
			hit = r.blocks.Len()
			computed = len(r.tokens) - 1
		} else {
			// The longest cached run of full blocks, never the last
			// token (vLLM recomputes it to get logits:
			// max_cache_hit_length = num_tokens - 1).
			maxHit := min(len(r.hashes), (len(r.tokens)-1)/bs)
			hit, unrefHits = e.cache.Match(r.hashes[:maxHit])
			computed = hit * bs
		}
		n := min(len(r.tokens)-computed, budget)
		need := ceilDiv(computed+n, bs) - hit
		if need+unrefHits > e.cache.FreeBlocks() {
			break
		}
		if !r.remoteKV {
			e.cache.Acquire(&r.blocks, r.hashes[:hit])
		}
		// A remote request's transferred blocks are allocated here and
		// published below: they become cached blocks of this replica.
		e.cache.Allocate(&r.blocks, need)
		if r.slotWaiting {
			wait := e.now - r.slotWaitFrom
			e.stats.LoRASlotWaits++
			e.stats.LoRASlotWaitSeconds += wait
			e.m.loraSlotWaits.Inc()
			e.m.loraSlotWaitSecs.Add(wait)
			r.slotWaiting = false
		}
		if evicted, loaded := e.lora.admit(r.adapter, e.now); loaded {
			e.loads++
			e.stats.LoRASwapIns++
			e.m.loraSwapIns.Inc()
			if evicted != "" {
				e.stats.LoRAEvictions++
				e.m.loraEvictions.Inc()
			}
		}
		r.computed = computed
		e.publish(r, computed+n)

		// vLLM records the lookup at admission; a re-admitted preempted
		// request goes to preempted_queries/hits, which are not exported
		// (KVCacheManager.record_prefix_cache_stats, PrefixCacheStats.record).
		//
		// Only local hits are prefix-cache hits. An engine with a KV
		// connector (a P/D role) also records the connector's lookup of
		// the rest, vllm:external_prefix_cache_*: the tokens not found
		// locally, of which the transferred ones hit (Scheduler.schedule:
		// connector_prefix_cache_queries = num_tokens − local hits, hits
		// = the connector's matched tokens).
		local := hit * bs
		if r.preemption == 0 {
			e.stats.PrefixQueries += int64(len(r.tokens))
			e.stats.PrefixHits += int64(local)
			e.m.prefixQueries.Add(float64(len(r.tokens)))
			e.m.prefixHits.Add(float64(local))
			if e.cfg.Role != RoleBoth {
				ext := 0
				if r.remoteKV {
					ext = r.transferred
				}
				e.stats.ExternalQueries += int64(len(r.tokens) - local)
				e.stats.ExternalHits += int64(ext)
				e.m.externalQueries.Add(float64(len(r.tokens) - local))
				e.m.externalHits.Add(float64(ext))
			}
		} else {
			e.stats.PreemptedQueries += int64(len(r.tokens))
			e.stats.PreemptedHits += int64(local)
		}
		if !r.admitted {
			r.admitted = true
			e.m.queueTime.Observe(e.now - r.arrival)
			r.out.mu.Lock()
			// vLLM's num_cached_tokens (usage cached_tokens): every
			// prompt token it did not compute, transferred ones included.
			r.out.cachedTokens = computed
			r.out.mu.Unlock()
		}

		if skip == 0 {
			e.waiting[0] = nil
			e.waiting = e.waiting[1:]
		} else {
			e.waiting = slices.Delete(e.waiting, skip, skip+1)
		}
		r.state = stateRunning
		e.running = append(e.running, r)
		e.batch = append(e.batch, work{r: r, tokens: n})
		budget -= n
	}

	if len(e.batch) == 0 {
		return false
	}
	prefill, decodes := 0, 0
	for _, w := range e.batch {
		if w.decode {
			decodes++
		} else {
			prefill += w.tokens
		}
	}
	// Adapters are loaded before the forward pass: the whole step waits.
	e.stepEnd = e.now + e.cfg.stepSeconds(prefill, decodes) + float64(e.loads)*e.cfg.AdapterLoad.Seconds()
	e.stats.Steps++
	return true
}

// complete applies the planned step at its end time: chunks advance, every
// request whose tokens are all computed samples one token, finished
// requests free their blocks.
func (e *engine) complete() {
	t := e.stepEnd
	finished := false
	for i := range e.batch {
		w := e.batch[i]
		e.batch[i] = work{}
		r := w.r
		if r.state != stateRunning {
			continue // aborted during the step
		}
		r.computed += w.tokens
		if r.computed < len(r.tokens) {
			continue // a prefill chunk; more to come
		}
		r.prefilled = true
		word := outputWord(r.seed, r.generated)
		r.tokens = append(r.tokens, outputTokenIDs[word])
		r.hashes = AppendAdapterBlockHashes(r.hashes, r.rootHash(), r.tokens, e.cfg.BlockSize)
		r.generated++
		// Counted before the request may finish below: a client that
		// scrapes /metrics right after its reply must see its tokens.
		e.stats.GenerationTokens++
		e.m.generationTokens.Inc()

		o := r.out
		o.mu.Lock()
		o.words = append(o.words, uint8(word))
		if r.generated == 1 {
			// The client's TTFT includes a remote prefill; the engine's
			// own histogram, below, starts at its arrival, as vLLM's.
			o.ttft = r.prior + (t - r.arrival)
		}
		o.mu.Unlock()
		if r.generated == 1 {
			e.stats.PromptTokens += int64(r.promptLen)
			e.m.promptTokens.Add(float64(r.promptLen))
			e.m.ttft.Observe(t - r.arrival)
		} else {
			e.m.interToken.Observe(t - r.lastToken)
		}
		r.lastToken = t

		if r.generated >= r.maxTokens {
			e.cache.Release(&r.blocks)
			e.lora.release(r.adapter, t)
			e.lora.leave(r.adapter)
			r.state = stateDone
			finished = true
			e.stats.RequestsDone++
			e.m.success[finishLength].Inc()
			e.m.e2e.Observe(t - r.arrival)
			o.finish(finishLength, nil)
		} else {
			o.poke()
		}
	}
	e.batch = e.batch[:0]
	e.now = t
	// vLLM records its adapter gauge with every step's scheduler stats.
	e.m.recordLoRA(e.lora.joined, e.unixAt(t))
	if finished {
		kept := e.running[:0]
		for _, r := range e.running {
			if r.state == stateRunning {
				kept = append(kept, r)
			}
		}
		clear(e.running[len(kept):])
		e.running = kept
	}
}

// snapshot fills the live fields of e.stats.
func (e *engine) snapshot() Stats {
	s := e.stats
	s.Waiting = len(e.waiting)
	s.Running = len(e.running)
	s.KVUsage = e.cache.Usage()
	s.CachedBlocks = e.cache.CachedBlocks()
	s.SimTime = e.now
	s.LoRALoaded = e.lora.loadedNames()
	s.LoRAInFlight = slices.Clone(e.lora.inflight)
	s.MaxLoRA = e.lora.max
	return s
}
