package workload

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Request is one LLM request in a workload.
type Request struct {
	Seq int           // position in the stream, 0..
	At  time.Duration // arrival offset from the start (open-loop Poisson)
	// Session is the hash key a client would send (x-session-id):
	// conversation id, agent trace id, tenant id... An empty Session means
	// the request carries no hash key: the client sends no x-session-id
	// header (unique-short's single-shot calls, and the workloads of clients
	// that send none). Requests with DependsOn >= 0 always have a Session
	// or a Conversation.
	Session string
	Tenant  string // tenant (for per-tenant analysis); may equal Session
	// Adapter is the LoRA adapter the request runs under, "" for the base
	// model: a client names it as the OpenAI body's model (see Model) and,
	// over gRPC, in the x-kvxds-adapter header. Set by multi-lora.
	Adapter string
	// Prompt is the full prompt text (what a stateless client re-sends each
	// turn), as single-space-separated pseudo-words: one word = one token.
	Prompt    string
	MaxTokens int // output length
	// DependsOn is the index (Seq) of the request whose reply must complete
	// before this one may be sent (next turn of a conversation / next agent
	// step), or -1. The load generator delays a dependent request until
	// max(At, done(dep)).
	DependsOn int
	// Conversation is the conversation (agent trace, tree of branches) the
	// request belongs to, whether or not the client sends it as Session:
	// for analysis only. "" for single-shot requests.
	Conversation string
	// System and Lead are byte lengths of Prompt's chat structure, set by
	// the workloads that model one (0 for the others): Prompt[:System] is
	// the system prompt (0: none) and Prompt[:Lead] the leading messages,
	// the system prompt and the first user message, which every later
	// turn and branch of the conversation re-sends unchanged (see
	// ChatBody).
	System, Lead int
}

// Model is the model the request's OpenAI body names: its adapter, or
// base when it has none.
func (r Request) Model(base string) string {
	if r.Adapter != "" {
		return r.Adapter
	}
	return base
}

// Generator produces a request stream.
type Generator interface {
	Name() string
	// Generate returns the requests arriving in [0, duration) for the given
	// seed and target arrival rate (requests/second), sorted by At,
	// deterministic: same (params, seed, rate, duration) → identical slice.
	// A non-positive or non-finite rate, or a non-positive duration, gives
	// nil.
	Generate(seed uint64, rate float64, duration time.Duration) []Request
}

var builtins = []struct {
	name string
	make func() Generator
}{
	{"chat", func() Generator { return Chat() }},
	{"chat-apps", func() Generator { return ChatApps() }},
	{"agent", func() Generator { return Agent() }},
	{"shared-prefix", func() Generator { return SharedPrefix() }},
	{"few-shot", func() Generator { return FewShot() }},
	{"zipf-tenants", func() Generator { return ZipfTenants() }},
	{"unique-short", func() Generator { return UniqueShort() }},
	{"chat-stateless", func() Generator { return ChatStateless() }},
	{"branching", func() Generator { return Branching() }},
	{"agent-stateless", func() Generator { return AgentStateless() }},
	{"retrieval", func() Generator { return Retrieval() }},
	{"system-prompt", func() Generator { return SystemPrompt() }},
	{"multi-lora", func() Generator { return MultiLoRA() }},
}

// ByName returns a new built-in generator with its default parameters:
// "chat" (no system prompt), "chat-apps" (chat with per-app system
// prompts), "agent", "shared-prefix", "few-shot", "zipf-tenants",
// "unique-short", or one of the workloads whose clients send no session
// id: "chat-stateless", "branching", "agent-stateless", "retrieval"; or
// "system-prompt", one hot system prompt in front of most conversations; or
// "multi-lora", chat over many LoRA adapters of one base model.
func ByName(name string) (Generator, bool) {
	for _, b := range builtins {
		if b.name == name {
			return b.make(), true
		}
	}
	return nil, false
}

// Names lists the built-in generators in a fixed order.
func Names() []string {
	out := make([]string, len(builtins))
	for i, b := range builtins {
		out[i] = b.name
	}
	return out
}

// vocab is the pseudo-word vocabulary: 4,096 four-letter consonant-vowel
// words, so a word index is exactly 12 bits and five words come from one
// 64-bit draw. Two random 16-word blocks collide with probability 2^-192.
var vocab = func() [4096][4]byte {
	const cons, vows = "bdfghjklmnprstvz", "aeio"
	var v [4096][4]byte
	for i := range v {
		v[i] = [4]byte{cons[i>>8&15], vows[i>>6&3], cons[i>>2&15], vows[i&3]}
	}
	return v
}()

// Words produces deterministic filler text of n tokens under the simulator's
// tokenizer assumption: one word = one token. Words are lowercase ASCII
// pseudo-words separated by single spaces, with no punctuation and no
// leading or trailing space. n <= 0 gives "".
func Words(r *rand.Rand, n int) string {
	if n <= 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(5 * n)
	writeWords(&b, r, n)
	return b.String()
}

// writeWords appends n pseudo-words to b, separated by single spaces (no
// leading or trailing space).
func writeWords(b *strings.Builder, r *rand.Rand, n int) {
	var buf [5 * 5]byte // five words with their separators
	first := true
	for n > 0 {
		x := r.Uint64()
		k := min(n, 5)
		m := 0
		for j := 0; j < k; j++ {
			if !first || j > 0 {
				buf[m] = ' '
				m++
			}
			w := vocab[x&4095]
			x >>= 12
			m += copy(buf[m:], w[:])
		}
		b.Write(buf[:m])
		first = false
		n -= k
	}
}

// Stream tags keep the seeded random streams of different purposes apart.
const (
	tagArrivals uint64 = iota + 1
	tagShared          // per-app / per-group / per-tenant shared text
	tagSession         // per session or per single request: structure
	tagText            // per session: text
	tagRound           // per shared-prefix round
	tagPick            // per-request choices of single-shot workloads
)

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// rngFor returns the random stream (seed, workload, tag, i). Streams are
// independent of each other, so the content of session i never depends on
// how many other sessions were generated.
func rngFor(seed uint64, workload string, tag, i uint64) *rand.Rand {
	h := uint64(0xcbf29ce484222325)
	for j := 0; j < len(workload); j++ {
		h = (h ^ uint64(workload[j])) * 0x100000001b3
	}
	a := splitmix(seed ^ splitmix(h^tag))
	return rand.New(rand.NewPCG(a, splitmix(a^splitmix(tag<<56^i))))
}

// poisson calls fn(i, at) for the arrivals i = 0, 1, ... of a Poisson process
// of the given rate (per second) starting at from, while at < until.
func poisson(r *rand.Rand, rate float64, from, until time.Duration, fn func(i int, at time.Duration)) {
	t := from.Seconds()
	for i := 0; ; i++ {
		t += r.ExpFloat64() / rate
		at := time.Duration(t * 1e9)
		if at >= until {
			return
		}
		fn(i, at)
	}
}

func validArgs(rate float64, duration time.Duration) bool {
	return rate > 0 && !math.IsInf(rate, 0) && duration > 0
}

// expDuration draws an exponential duration with the given mean.
func expDuration(r *rand.Rand, mean time.Duration) time.Duration {
	if mean <= 0 {
		return 0
	}
	return time.Duration(r.ExpFloat64() * float64(mean))
}

// finalize keeps the requests with At in [0, duration), sorts them by At
// (ties keep generation order, so a dependency, generated first, stays
// first), sets Seq, and rewrites DependsOn from an index into reqs to an
// index into the result (-1 if the dependency was dropped for arriving
// before zero).
func finalize(reqs []Request, duration time.Duration) []Request {
	order := make([]int, 0, len(reqs))
	for i := range reqs {
		if reqs[i].At >= 0 && reqs[i].At < duration {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(reqs[a].At, reqs[b].At) })
	newIdx := make([]int, len(reqs))
	for i := range newIdx {
		newIdx[i] = -1
	}
	out := make([]Request, len(order))
	for i, old := range order {
		newIdx[old] = i
		rq := reqs[old]
		rq.Seq = i
		if rq.DependsOn >= 0 {
			rq.DependsOn = newIdx[rq.DependsOn]
		}
		out[i] = rq
	}
	return out
}

func id(prefix string, i int) string { return prefix + strconv.Itoa(i) }

// sharedTexts draws n shared texts (system prompts, schemas, templates) of
// lengths from length, each from its own stream.
func sharedTexts(seed uint64, workload string, n int, length func(r *rand.Rand) int) []string {
	out := make([]string, n)
	for i := range out {
		r := rngFor(seed, workload, tagShared, uint64(i))
		out[i] = Words(r, max(1, length(r)))
	}
	return out
}

// joinWords returns prefix + " " + n fresh words.
func joinWords(prefix string, r *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(len(prefix) + 1 + 5*n)
	b.WriteString(prefix)
	if n > 0 {
		b.WriteByte(' ')
		writeWords(&b, r, n)
	}
	return b.String()
}
