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
//     sim:lora_evictions_total count swap-ins and evictions, and
//     sim:lora_slot_waits_total and sim:lora_slot_wait_seconds_total the
//     requests admitted after being passed over for a slot and the time
//     from their first pass-over to their admission (Stats too).
//   - Prefill/decode disaggregation (Config.Role; pd.go), as llm-d runs
//     it with vLLM's NixlConnector. A RoleDecode replica given a request
//     whose x-prefiller-host-port header (gRPC metadata too) names a
//     prefill replica first sends it there over the same API
//     (StreamingOutputCall, or the same OpenAI path with max_tokens 1 and
//     stream off), as llm-d's routing sidecar does, and waits for its
//     token. The request then arrives at the decode engine holding the
//     blocks it caches itself; the other prompt tokens' KV is transferred
//     (only those, as NIXL reads only the blocks beyond the local hit) in
//     Config.TransferPerToken each of simulated time, on the handler's
//     goroutine, while the engine runs on; a request still waiting for its
//     KV is passed over, as vLLM's WAITING_FOR_REMOTE_KVS. Admitted, it
//     allocates the transferred blocks, which become cached blocks of the
//     decode replica, and computes only the last prompt token, whose step
//     yields its first token. vllm:prefix_cache_hits_total counts only
//     local hits; vllm:external_prefix_cache_queries_total and
//     _hits_total (P/D roles only) count the tokens not found locally and
//     the transferred ones; cached_tokens counts both, as vLLM's
//     num_cached_tokens. The client's TTFT (trailer, headers) is the
//     prefill replica's as it measured it, plus the transfer, plus the
//     decode engine's wait and step; vLLM's histograms start at the decode
//     engine. Without the header, or when the prefill replica fails, the
//     decode replica prefills locally and never fails the client (the real
//     sidecar would return the prefill error); sim:pd_remote_prefills_total,
//     sim:pd_local_prefills_total{reason="no_header"|"failed"} and
//     sim:pd_transferred_tokens_total count them. A client that runs the
//     two steps itself (vLLM's proxy pattern) prefills on a RolePrefill
//     replica, which names its address in x-replica-addr on every answer,
//     and names that replica in x-kv-transfer-from to the decode replica,
//     which then pulls the KV without calling it. RolePrefill replicas
//     otherwise serve as RoleBoth ones do; RoleBoth, the zero value,
//     ignores the headers and exports none of this.
//   - Time: the engine clock advances by the modelled step durations; the
//     loop sleeps so that simulated time runs Config.TimeScale times as fast
//     as the wall clock, and sleeps without a timer when idle. One goroutine
//     per replica; no per-token goroutines or timers.
//
// Not modelled for P/D: the network between replicas (a remote prefill
// costs what the prefill replica measured), blocks held by the prefill
// replica until the decode replica has read them, KV layouts that differ
// between the two (heterogeneous TP), and a transfer failing half-way.
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
// TransferPerToken 4µs, TimeScale 1.
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
//   - A decode replica adds the prefill replica's id, its prompt and cached
//     tokens and the transferred tokens to each generation's trailer
//     (x-prefill-replica-id, x-prefill-prompt-tokens,
//     x-prefill-cached-tokens, x-transferred-tokens) and HTTP headers
//     (X-Prefill-Replica-Id, …).
//
// ListenGRPC adds a second port where gRPC is served by gRPC's own
// transport (cheaper per streamed token) and HTTP/1.1 as on the first.
//
// Text becomes tokens with Tokenize (about one token per word), chat
// messages through RenderChat; load generators use the same functions, and
// Cache on its own gives offline upper bounds for a trace.
package sim
