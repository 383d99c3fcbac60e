// Package sim simulates LLM inference replicas that behave like vLLM V1
// with automatic prefix caching, so that the benefit of kvxds' routing can
// be measured on the engine's own counters (prefix-cache hit rate, TTFT)
// rather than asserted.
//
// # What is modelled
//
// A Replica is one engine with one scheduler loop in simulated time:
//
//   - KV cache (Cache): a fixed pool of Config.KVBlocks blocks of
//     Config.BlockSize tokens. A full block is identified by a hash chained
//     on its parent's hash, so content only hits after the same prefix;
//     partial blocks are never shared. Blocks of running sequences are
//     referenced and never evicted; a finished or preempted sequence's full
//     blocks stay cached, unreferenced, and are evicted LRU (tail of the
//     sequence first) when a block is needed. Generated tokens fill blocks
//     too, so a conversation's next turn can hit the previous reply.
//     (vLLM: v1/core/block_pool.py, kv_cache_manager.py, kv_cache_utils.py.)
//   - Admission: a waiting request reuses the longest run of cached full
//     blocks from its start, capped below its last token (vLLM recomputes
//     the last token to get logits), and allocates blocks for the tokens it
//     schedules. vllm:prefix_cache_queries_total += its tokens and
//     vllm:prefix_cache_hits_total += the hit tokens, once, when it is
//     admitted; a re-admission after preemption is counted apart (Stats
//     PreemptedQueries/PreemptedHits) and not exported, as vLLM does.
//   - Scheduler (vLLM V1 Scheduler.schedule): each step gives every running
//     request, in admission order, its next tokens out of
//     Config.TokenBudget (one for a decode, a chunk for a prefill in
//     progress), then admits waiting requests FCFS while the budget,
//     Config.MaxRunning and free blocks allow; the queue head blocks those
//     behind it. If a running request needs a block and none is free or
//     evictable, the most recently admitted running request is preempted
//     (recompute): its blocks are released (full ones stay cached), it goes
//     back to the front of the waiting queue, vllm:num_preemptions_total
//     counts it, and no waiting request is admitted in that step.
//   - Step cost: Config.DecodeStepBase + uncached prompt tokens scheduled /
//     Config.PrefillTokensPerSec + decoding sequences × Config.DecodePerSeq.
//     Prefix hits cost nothing. A request whose last prefill chunk (or
//     decode) is in a step gets one token at the end of that step; TTFT is
//     the end of the step holding its final prefill chunk minus arrival.
//   - LoRA adapters: a request names one in the OpenAI body's model field
//     (any name but the base model's; empty or the base model's name is no
//     adapter) or, over gRPC, in the x-kvxds-adapter header. Config.MaxLoRA
//     slots hold loaded adapters (vLLM --max-loras). Admitting a request
//     whose adapter holds no slot loads it into a free slot, or into the
//     slot of the least recently used adapter with no running request (an
//     eviction), and that step costs Config.AdapterLoad more, before its
//     forward pass (a swap-in). If every slot holds an adapter with running
//     requests, the request is passed over and keeps its place while
//     requests behind it are admitted (vLLM V1's scheduler). Prefix caches
//     are per adapter: every block hash chains on the adapter's root
//     (AdapterRoot), so the same tokens under two adapters share no block.
//     vllm:lora_requests_info is written every step as today's vLLM writes
//     it (see metrics.go); sim:lora_swap_ins_total and
//     sim:lora_evictions_total count swap-ins and evictions (Stats too).
//   - Time: the engine clock advances by the modelled step durations; the
//     loop sleeps so that simulated time runs Config.TimeScale times as fast
//     as the wall clock, and sleeps without a timer when idle. One goroutine
//     per replica; no per-token goroutines or timers.
//
// Not modelled: sampling (every request runs to max_tokens, finish reason
// "length"), stop strings, max_model_len beyond the KV capacity, vLLM's null
// block, CPU offload, speculative decoding, LoRA's extra compute per token
// and its CPU adapter cache (every swap-in costs the same), a list of
// known adapters (any name loads), and attention cost growing with
// context length (DecodePerSeq is an average).
//
// Default parameters, for Llama-3.1-8B-Instruct on one H100 (see Config
// for the sources and assumptions behind each): BlockSize 16, KVBlocks
// 29000, MaxRunning 256, TokenBudget 8192, PrefillTokensPerSec 10000,
// DecodeStepBase 12ms, DecodePerSeq 50µs, MaxLoRA 4, AdapterLoad 50ms,
// TimeScale 1.
//
// # Interfaces
//
// Each replica serves one port (Start) with HTTP/1.1 and h2c:
//
//   - POST /v1/completions and /v1/chat/completions, OpenAI-compatible,
//     streaming (SSE) or not, with usage.prompt_tokens_details.cached_tokens
//     and the headers X-Replica-Id, X-Prompt-Tokens, X-Cached-Tokens and
//     X-Ttft-Seconds; GET /v1/models, GET /health.
//   - GET /metrics: vLLM V1 metric names and labels ({engine="0",
//     model_name=...}) on a per-replica registry.
//   - gRPC grpc.testing.TestService (StreamingOutputCall streams one message
//     per token; UnaryCall reports the replica id) and grpc.health.v1.
//
// ListenGRPC adds a second port where gRPC is served by gRPC's own
// transport (cheaper per streamed token) and HTTP/1.1 as on the first.
//
// Text becomes tokens with Tokenize (about one token per word), chat
// messages through RenderChat; load generators use the same functions, and
// Cache on its own gives offline upper bounds for a trace.
package sim
