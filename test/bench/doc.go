// Package bench measures what kvxds's routing does for prefix-cache
// locality, on the engines' own counters rather than by assertion.
//
// For one workload (test/workload) and seed, every routing mode replays the
// byte-identical request sequence, each on a fresh simulated fleet
// (test/sim: vLLM V1 replicas with empty prefix caches) behind a fresh
// in-process kvxds serving a generated policy, through grpc-go's own xDS
// client: the real data plane. The modes are round_robin and least_request
// (baselines through kvxds, load_balancing in the policy), kvxds (ring hash
// on x-session-id, with the metrics, escape and weights blocks as a policy
// written from the policy reference has them: DeployedBlocks) and
// kvxds+weights (the same blocks tuned for the simulated engine, see
// below), and upper-bound, computed offline. index and index-llmd, run
// only when named, are the stateful routers users pick instead of a hash,
// picking each request's replica in the load generator and dialling it
// directly: IndexRouter, SGLang's cache_aware policy (an approximate radix
// tree of the prompt text each replica served, longest match above
// cache_threshold, else the smallest tree, and least-loaded under
// imbalance), and LLMDRouter, llm-d's default profile (prefix-cache
// scorer over a block-hash index with an LRU per replica, weight 3; the
// engines' waiting queues and KV usage, weight 2 each; the highest sum
// wins). kvxds+prefix and kvxds+conversation, run only when named, key
// kvxds on the chat body a client without a session id sends (KeyBody):
// its prompt_prefix of Config.PromptPrefix bytes, or its conversation key
// (the leading messages). The grpc-go clients compute the key as Envoy's
// filter would and send it as x-session-id; the Envoy data plane runs the
// served filter on the body. kvxds+adapters and index-llmd+lora, run
// only when named, are for LoRA adapters (the multi-lora workload): the
// deployed kvxds policy plus an adapters block (AdaptersBlock: each
// adapter on replicas of its own within Config.MaxLoRA slots), and
// LLMDRouter with llm-d's lora-affinity scorer on each replica's
// vllm:lora_requests_info. Requests name their adapter in the chat body's
// model (which Envoy's filter copies into x-kvxds-adapter) and, over gRPC,
// in x-kvxds-adapter metadata; every replica has Config.MaxLoRA slots, and
// the report counts each mode's swap-ins (sim:lora_swap_ins_total) and
// the requests that waited for a slot (sim:lora_slot_waits_total), with
// their mean wait. Config.Bare (--bare) renders kvxds,
// kvxds+prefix, kvxds+conversation and kvxds+bounded without the metrics,
// escape and weights blocks: pure consistent hashing, for comparison.
//
// # Workloads
//
// Any of workload.Names(). chat is multi-turn conversations without a
// system prompt (ShareGPT-style): a turn can only hit its own
// conversation's history, so it measures session affinity alone.
// chat-apps is the same conversations, each starting with one of 4 apps'
// shared system prompts (≈22% of its prompt tokens), a mix of chat and
// shared-prefix traffic: round robin hits the system prompts too, so its
// baseline is higher and affinity's margin smaller. unique-short, the
// negative control, sends no session key at all (see below), so every
// mode spreads it without affinity. chat-stateless, branching,
// agent-stateless and retrieval model clients that send no session id
// either: kvxds and kvxds+weights, which hash on x-session-id, are skipped
// for them; the body-keyed modes and index route them. system-prompt is
// chat behind one hot system prompt, keyed on the application (see Hot
// keys below).
//
// # The load generator
//
// A few grpc-go clients (Config.Clients, each its own xDS node; a session
// always uses the same one; on the Envoy data plane as many Envoys) send each request open-loop at its arrival time,
// or when the request it depends on (the previous chat turn or agent step)
// completes, whichever is later, with header x-session-id = Request.Session.
// A request without a session (Session "": unique-short's single-shot calls)
// carries no key: it is sent without the header, by client Seq mod
// Config.Clients, and a hash pool routes it by its keyless fallback (the
// pool's keyless setting, which the generated policies leave at its default,
// round_robin over the same replicas: the kvxds modes then spread
// unique-short like the round_robin baseline). Each request is a
// grpc.testing StreamingOutputCall whose payload is {"prompt",
// "max_tokens"}; the replica streams one message per token. The client
// records send, first message and completion times, the replica (header
// x-replica-id) and the engine's accounting (trailer x-prompt-tokens,
// x-cached-tokens, x-ttft-seconds). Before the first request, EmptyCalls
// (which no engine counter sees), with and without a key, open a
// connection to every replica.
//
// With Config.DataPlanes including Envoy, every workload runs again with
// Envoy's routing in place of grpc-go's (envoy.go): each client is an ADS
// stream (its own connection) as an Envoy node, whose received resources
// build xds/envoylb's tables, with its own requests in flight, random
// source and LuaJIT process, as separate Envoys have; a request is routed through the pool listener's route, hash
// policies and bounded load on that Envoy's requests in flight, body keys
// come from the listener's Lua filter run in LuaJIT, and the request goes
// over HTTP/1.1 to the replica's /v1/completions (streamed, same prompt).
// The grpc-go data plane dials each replica's ListenGRPC port, served by
// gRPC's own transport.
//
// # Hot keys
//
// Every kvxds mode's pool spreads its hot keys at kvxds's defaults
// (HotKeysBlock: interval and half-life divided by the time scale). The
// filters of a simulated Envoy read the chat body a chat client sends
// (KeyBody), so the Lua filter, which every Envoy pool with hot keys
// runs, header-keyed or not, computes x-kvxds-spread from it; each Envoy sends its
// listener's gRPC access log (adsenvoy.AccessLogger) to kvxds's xDS
// address, on its own stream as its own node, with the headers it routed
// with; where the router has an upstream log (a pool bounding prompt
// bytes on every Envoy's load), it writes Envoy's UpstreamPoolReady entry
// once the host is chosen and UpstreamEnd at the response's end, with
// the x-request-id its connection manager gave the request and the
// body's content-length, and its Lua filters read handle:timestamp() as
// wall milliseconds. A grpc-go client sends each request's x-kvxds-spread itself
// (withSpreads: bodykey.Spread of the conversation bytes of its chat body).
// Config.NoHotKeys turns hot keys off and sends no spread sub-key: the
// ablation. system-prompt puts 90% of the requests under one session
// key: the hot key.
//
// Chat turns and agent steps re-send the reply the engine generated for
// the previous request (Config.EchoReplies, on in kvxds-bench): see
// PrepareRequests.
//
// # Time scale and CPU
//
// The simulator runs simulated time TimeScale times faster than the wall
// clock; every time and rate reported is simulated (wall × TimeScale). The
// cost of a run is its streamed tokens, one gRPC message each on both
// sides, so the default time scale is chosen per workload to keep the
// streamed-token rate near Config.MessageBudget (40,000 per wall second;
// the simulator, kvxds and the clients together then use 0.3–0.9 of one
// core in the full benchmark), within [1, 15]. With the defaults (8
// replicas, load 0.7) that is 6.5 for chat, 8.5 for chat-apps, 10.5–15 for
// agent, shared-prefix, few-shot and zipf-tenants, and 1.5 for
// unique-short, whose many short requests stream ≈29,000 tokens per
// simulated second. Each mode reports the process's CPU
// time over its wall time (getrusage) and the whole machine's (/proc/stat);
// the report flags a mode during which the machine's CPUs were more than
// 85% busy, since the simulator then falls behind the wall clock and the
// timings stretch. Client-side TTFT minus the engine's own TTFT of the same
// request (trailer) is reported too: the harness's overhead, in simulated
// time.
//
// A stream lasts Config.WallPerMode (16 s) of wall time × the time scale,
// times the workload's Profile.WallFactor: 2 for chat, whose conversations
// of up to 20 turns live for minutes and whose long histories carry most
// prompt tokens, so that a short window is dominated by a few of them (at
// 1×, round robin's hit rate moved between 0.22 and 0.24 over seeds 1–3,
// and was 0.20 in runs three times longer).
//
// # Load
//
// Load is the offered request rate as a fraction of the fleet's capacity
// without any prefix reuse, round robin's worst case (Capacity): from the
// workload's steady-state mean prompt P and output O (MeasureShape, on a
// 600 s stream) and the simulator's step-time model, a saturated replica
// batches B = min(MaxRunning, TokenBudget, KV tokens / (P + O)) sequences
// and spends P / PrefillTokensPerSec + O × (DecodePerSeq + DecodeStepBase /
// B) seconds of engine time per request. Rate = Load × Replicas / that.
// Prefix hits only lower the work, so under affinity the same rate is a
// lighter load.
//
// # KV capacity
//
// Each replica's KV pool (Config.KVBlocks, else Profiles) is sized so that
// it cannot hold the working set of all sessions (then round robin would
// hit too) but holds its share under affinity plus the KV of its running
// requests; Profiles documents the numbers per workload. The upper bound is
// one cache of Replicas × KVBlocks.
//
// # Warm-up
//
// Multi-turn sessions start Config.PreStart (60 s) before time zero (the
// workloads' Warmup), so the stream is in steady state from its first
// request, and the first Config.WarmupFraction (20%) of the requests fill
// the caches and are left out of every statistic: the engines' counters
// and histograms are scraped when the first measured request is sent and
// again at the end, and differenced; client-side figures skip the warm-up
// requests; queue depths are averaged from that moment to the last
// arrival; the upper bound replays every request but counts only the
// measured ones.
//
// # What is reported
//
//   - Hit rate: Σ vllm:prefix_cache_hits_total / Σ
//     vllm:prefix_cache_queries_total over the replicas' /metrics (parsed
//     with expfmt), the increase over the measured part; also the same
//     ratio from the trailers, as a cross-check.
//   - TTFT p50/p95/p99: at the client (send to first message), and from
//     the replicas' vllm:time_to_first_token_seconds histograms merged
//     bucket by bucket and interpolated as histogram_quantile does.
//   - Throughput: requests completed, and tokens streamed, per simulated
//     second between the first measured arrival and the last arrival.
//   - Queue depth: each replica's requests waiting or running
//     (Replica.Stats, sampled every 100 ms of wall time), mean and max per
//     replica; balance = max over replicas of the mean depth / mean over
//     replicas of the mean depth (1 is perfect, N is one replica doing
//     everything).
//   - Sessions moved: sessions with at least two requests whose successful
//     requests landed on more than one replica. Requests without a session
//     belong to none (unique-short reports 0 of 0).
//   - Escapes and weight moves (kvxds+weights): replicas taken out of the
//     hash table, and weight changes that change a replica's share.
//   - Failed requests: any request that did not stream all its tokens.
//
// # The documented defaults in kvxds
//
// kvxds, kvxds+prefix, kvxds+conversation and kvxds+bounded run with
// metrics { engine = "vllm" }, escape {} and weights {} at the policy
// reference's defaults: saturated at 8 waiting requests
// (vllm:num_requests_waiting), 90% KV occupancy or any preemption, back
// below 4 and 80% after a 30 s hold, at most half the fleet out; weights 1
// to 4 in 4 levels following free capacity, at most one move per 30 s;
// scraped every 2 s. Durations are engine time, divided by the time scale
// into kvxds's wall time. The rolling workload runs kvxds bare: it
// measures what membership changes alone move.
//
// # The escape hatch in kvxds+weights
//
// See Escape: kvxds scrapes each replica every 250 ms of wall time and
// reads vllm:num_requests_running as its queue depth (requests hardly ever
// wait in the simulated engine at these loads, so vllm:num_requests_waiting
// would never fire). A replica is saturated at 3× the mean number of
// requests a replica runs at this load (measured under kvxds just before,
// never below 8), at 90% KV occupancy or on any preemption, and returns
// after 10 simulated seconds below that mean; up to 3/4 of the fleet may be
// out at once. Weights move between 1 and 2 with free capacity, at most
// once per 30 simulated seconds. The factor trades balance for hits: at
// 2.5× the zipf-tenants hot tenant is spread as well, but shared-prefix
// groups start to bounce between replicas (76 escapes in 3 simulated
// minutes, hit rate 0.94 → 0.77, TTFT p95 64 ms → 1.6 s); at 3× it takes
// one escape there and the zipf-tenants balance still ends near 1.2.
//
// # The rolling workload
//
// rolling (RollingName, not among workload.Names()) measures a rolling
// restart: chat traffic on Config.Replicas pods that a Kubernetes API
// server (test/kube: a real kube-apiserver and etcd) lists in one
// EndpointSlice, which kvxds follows through its kubernetes discovery
// (the generated policy's kubernetes block and a kubeconfig), replaced
// one at a time while the traffic runs. The API server refuses loopback
// addresses, so every pod's replica serves at its own address in a
// network namespace (test/netns), reached from the host. It needs root,
// iproute2 and make kube-deps (RollingUsable); `--workload all` runs it
// only where those are there and otherwise says why it skips it, and
// asking for it there fails with the reason.
//
// After Rolling.Warmup (40 s) and Rolling.Steady (50 s) one pod is
// replaced every Rolling.Step (15 s) until all have been, then the stream
// runs Rolling.After (30 s) more: 4 simulated minutes with 8 replicas, at
// a time scale of at most 5 (the API server, etcd and the namespace's
// traffic share the CPU too), about 50 s of wall time per run. A new pod has an empty cache and a new
// address, is listed not ready at first and ready Rolling.Startup (2 s)
// later. An old pod is listed terminating and still serving (kvxds
// drains it: its sessions move, its requests in flight go on) for
// Rolling.Drain (4 s), then shuts down as an engine does on SIGTERM,
// letting its requests stream to their end (sim.Replica.Shutdown; cut off
// after Rolling.Grace, 60 s, and counted as failed), and is removed from
// the slice. Two variants: statefulset, where the old pod goes first and
// the new one comes up under its name (its identity on the ring), highest
// ordinal first; deployment, where a new pod with a new random name is
// ready before an old one terminates (maxSurge 1). Each runs under
// round_robin and kvxds (the other modes are left out), replaying the
// same request sequence, each run on a fresh fleet, Service and kvxds.
// The roller times each change by when kvxds's model first shows it.
//
// Replicas that leave take their counters with them, so the rolling
// workload's hit rates come from the responses' trailers (each request's
// x-cached-tokens and x-prompt-tokens, the replica's own accounting),
// Σ cached / Σ prompt tokens of the requests sent in a window: steady
// (from the warm-up's end to the roll), during the roll (from the first
// replacement's start to the last one's end) and after it. Loss is steady
// − during, also relative to steady; TTFT p95 is at the client, per
// window. A turn sent during the roll whose previous turn went to a pod
// that stayed ready and not terminating in between is a turn on a pod
// that stayed: kvxds should keep it there (a move to another pod that
// stayed is one no membership change asked for) and hitting. The report
// adds the hit rate over time per variant (a chart marking the roll and
// each replacement) and rolling.csv.
//
// # Prefill/decode disaggregation
//
// With Config.PD (--pd P:D), every workload runs instead on P replicas of
// sim.RolePrefill and D of sim.RoleDecode. On the Envoy data plane each
// request goes to a decode replica naming its prefill replica in
// x-prefiller-host-port, and the decode replica prefills it there, receives
// the KV and decodes (see pd.go for the modes). The simulated Envoy runs
// every Lua filter of the decode pool's listener, the prefill key and
// prefill filters among them, with the table kvxds serves in the route's
// metadata. On grpc-go each client runs the two steps itself on two xDS
// targets: a prefill call on the prefill pool, then a decode call naming
// the replica that holds the KV in x-kv-transfer-from. The report gives the prefill side's hit rate, TTFT and TPOT at
// the client, each role's balance, local prefills and transferred KV
// (PDResult).
//
// The ring hash uses RingSize entries.
package bench
