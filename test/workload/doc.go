// Package workload generates the synthetic LLM request streams that kvxds's
// benchmark replays through the router to measure prefix-cache locality.
//
// # Workloads
//
// [ByName] and [Names] list the built-ins:
//
//   - chat ([Chat]): multi-turn conversations without a system prompt,
//     ShareGPT-style; conversations share nothing, each turn extends the
//     last.
//   - chat-apps ([ChatApps]): the same conversations, each starting with one
//     of 4 apps' system prompts (200–500 tokens), so conversations of an app
//     also share a prefix: chat mixed with shared-prefix traffic.
//   - agent ([Agent]): tool-using agent traces, long growing prompts.
//   - shared-prefix ([SharedPrefix]): groups of prompts with a long common
//     system prompt.
//   - few-shot ([FewShot]): a few templates of worked examples, short
//     queries.
//   - zipf-tenants ([ZipfTenants]): per-tenant system prompts, Zipf-skewed
//     volume with one hot tenant.
//   - unique-short ([UniqueShort]): the negative control, short prompts that
//     share nothing and carry no session key (Session "").
//
// Clients that send no session id (most OpenAI-compatible SDKs, agent
// frameworks and IDEs), each with Session "" and Conversation set:
//
//   - chat-stateless ([ChatStateless]): chat, byte for byte, without the
//     session id.
//   - branching ([Branching]): conversations that branch: regenerated
//     replies, edited messages, and continuations sampled at once (tree
//     search) from one shared history.
//   - agent-stateless ([AgentStateless]): agent, byte for byte, without
//     the session id: tool-call loops.
//   - retrieval ([Retrieval]): a shared system prompt, then one of a
//     library of long documents that many users send (Zipf popularity)
//     and each user's own question, with follow-ups.
//
// One hot key:
//
//   - system-prompt ([SystemPrompt]): one 2,000-token system prompt in
//     front of 90% of the conversations, chat's turns under it; the
//     session key is the application, so one key carries 90% of the
//     requests.
//
// LoRA adapters:
//
//   - multi-lora ([MultiLoRA]): chat over 100 LoRA adapters of one base
//     model, each conversation bound to one adapter (Request.Adapter),
//     adapters' popularity Zipf-skewed (a few hot, a long cold tail), a
//     fifth of the conversations on the base model.
//
// Request.Session is the hash key a client sends (x-session-id); an empty
// Session means the request carries none. System and Lead mark the chat
// structure of a prompt (system prompt, leading messages), and ChatBody
// builds the OpenAI body that a body key such as the conversation key
// reads.
//
// # Contract
//
// A [Generator] turns (seed, rate, duration) into a slice of [Request]s that
// is:
//
//   - deterministic: the same parameters, seed, rate and duration give a
//     deep-equal slice (math/rand/v2 PCG streams only; lengths go through
//     math.Exp/math.Log, so a different CPU architecture could in principle
//     round a rare length differently);
//   - sorted by [Request.At], with Seq equal to the slice index;
//   - closed under dependencies: DependsOn is -1 or the Seq of an earlier
//     request in the same slice;
//   - prefix-stable in duration: the requests of Generate(seed, rate, d1) are
//     exactly the requests with At < d1 of Generate(seed, rate, d2) for any
//     d2 >= d1. Every session (or single request) draws its content from its
//     own seeded stream, keyed by its index, so nothing depends on where the
//     horizon falls.
//
// # Routing independence
//
// Every routing mode under test must see the byte-identical request sequence,
// so nothing in a stream depends on what a replica answers. Multi-turn
// workloads (chat, chat-apps, agent) therefore define the assistant's reply text
// themselves: a reply is MaxTokens seeded pseudo-words, and the next turn's
// prompt carries that text. The replica's actual output is ignored; the
// workload assumes it generates exactly MaxTokens tokens (no early stop).
//
// # Tokens
//
// The simulator counts one token per whitespace/punctuation-separated word,
// so all text is lowercase ASCII pseudo-words separated by single spaces, with
// no punctuation, and every length in this package is a word count (see
// [Words]). A prompt of n tokens therefore has exactly n fields under
// strings.Fields.
//
// # Arrivals
//
// Arrivals are an open-loop Poisson process at the requested rate
// (requests/second), generated until duration. For single-shot workloads
// each request is one arrival. For session workloads (chat, chat-apps,
// agent) sessions start as a Poisson process at rate / (mean requests per
// session), so the long-run request rate equals rate; each later request's
// At is the previous request's At plus a think/tool time, and it is a lower
// bound only: the load generator sends a dependent request at max(At,
// completion of DependsOn).
// Sessions that would continue past duration are truncated. A cold start
// (Warmup = 0, the default) means the request rate ramps up over the first
// few session lengths; set Warmup to start sessions before time zero and
// measure a steady state instead.
//
// # Memory
//
// The prompts of one session are substrings of one string holding the
// session's full history, so a conversation of T turns costs O(T) bytes, not
// O(T²). Prompts of the single-shot workloads are separate strings (a shared
// prefix plus a unique suffix cannot share memory in Go); ten minutes of
// shared-prefix traffic at 20 req/s holds about 12,000 × 11 KB ≈ 130 MB.
// Text averages five bytes per token.
package workload
