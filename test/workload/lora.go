package workload

import (
	"math"
	"sort"
	"strings"
	"time"
)

// MultiLoRAWorkload is multi-turn chat over many LoRA adapters of one base
// model, as a multi-tenant fine-tuning platform serves it: each
// conversation is bound to one adapter (the OpenAI body's model names it),
// adapters' popularity is Zipf-skewed so that a few are hot enough to need
// several replicas while most are rarely used, and some conversations use
// the base model. Each adapter is an application with its own system
// prompt; turn k of a conversation is
//
//	system(adapter) ␣ user₀ ␣ reply₀ ␣ … ␣ reply_{k−1} ␣ user_k
//
// as in chat-apps, so an adapter's conversations share its system prompt
// and each conversation's turns extend the last. Base-model conversations
// have no system prompt.
//
// A conversation picks the base model with probability BaseShare, else
// adapter k (0-based) with probability ∝ (k+1)^−S. Request.Adapter is
// "adapter-K" (or "" for the base model), Session the conversation
// ("lora-chat-N"), Tenant the adapter (or "base").
//
// Conversations start as a Poisson process at rate / Turns.Expected();
// each turn depends on the previous one. Lengths are in tokens.
type MultiLoRAWorkload struct {
	// Adapters is the number of adapters. Default 100.
	Adapters int
	// S is the Zipf exponent of adapter popularity. Default 1.1: with
	// the default BaseShare, adapter 0 draws 18.7% of all requests,
	// adapter 1 8.7%, adapter 2 5.6%, and the last fifty together 8.4%.
	// On 8 replicas (a fair share of 12.5% each) adapter 0 alone is half
	// again one replica's share, and on 16 replicas adapters 0 and 1 need three
	// and one and a half replicas' shares, while most adapters see a
	// request now and then.
	S float64
	// BaseShare, in [0, 1), is the fraction of conversations that use the
	// base model. Default 0.2.
	BaseShare float64
	// SystemPromptLen is each adapter's system prompt length, drawn once
	// per adapter. Default uniform 100–400.
	SystemPromptLen UniformInt
	// Turns is the number of turns per conversation. Default geometric,
	// mean 4, capped at 16.
	Turns Geometric
	// UserLen and ReplyLen are as in chat. Defaults: log-normal, median
	// 60, σ 1.0, 4–1024; median 150, σ 0.8, 8–512.
	UserLen, ReplyLen LogNormal
	// ThinkTime is the mean time between a turn's arrival and the next
	// turn's earliest send time. Default 5s.
	ThinkTime time.Duration
}

// MultiLoRA returns the multi-LoRA workload with its defaults.
func MultiLoRA() *MultiLoRAWorkload {
	return &MultiLoRAWorkload{
		Adapters:        100,
		S:               1.1,
		BaseShare:       0.2,
		SystemPromptLen: UniformInt{Min: 100, Max: 400},
		Turns:           Geometric{Mean: 4, Max: 16},
		UserLen:         LogNormal{Median: 60, Sigma: 1.0, Min: 4, Max: 1024},
		ReplyLen:        LogNormal{Median: 150, Sigma: 0.8, Min: 8, Max: 512},
		ThinkTime:       5 * time.Second,
	}
}

// Name is "multi-lora".
func (m *MultiLoRAWorkload) Name() string { return "multi-lora" }

// AdapterName is the name of adapter k, the model a request under it
// names.
func AdapterName(k int) string { return id("adapter-", k) }

// Shares returns the expected share of conversations (and so of requests)
// of each adapter, then, last, of the base model; they sum to 1.
func (m *MultiLoRAWorkload) Shares() []float64 {
	n := max(m.Adapters, 0)
	base := min(max(m.BaseShare, 0), 1)
	if n == 0 {
		return []float64{1}
	}
	w := make([]float64, n+1)
	sum := 0.0
	for k := range n {
		w[k] = math.Pow(float64(k+1), -m.S)
		sum += w[k]
	}
	for k := range n {
		w[k] *= (1 - base) / sum
	}
	w[n] = base
	return w
}

// Generate implements [Generator].
func (m *MultiLoRAWorkload) Generate(seed uint64, rate float64, duration time.Duration) []Request {
	if !validArgs(rate, duration) {
		return nil
	}
	const name = "multi-lora"
	shares := m.Shares()
	n := len(shares) - 1 // adapters; index n is the base model
	cum := make([]float64, len(shares))
	acc := 0.0
	for k, s := range shares {
		acc += s
		cum[k] = acc
	}
	systems := sharedTexts(seed, name, n, m.SystemPromptLen.Sample)

	var reqs []Request
	var turns []chatTurn
	poisson(rngFor(seed, name, tagArrivals, 0), rate/m.Turns.Expected(), 0, duration, func(i int, start time.Duration) {
		r := rngFor(seed, name, tagSession, uint64(i))
		k := min(sort.SearchFloat64s(cum, r.Float64()*acc), n)
		adapter, tenant, system := "", "base", ""
		if k < n {
			adapter = AdapterName(k)
			tenant, system = adapter, systems[k]
		}
		turns = turns[:0]
		at := start
		for t := range m.Turns.Sample(r) {
			if t > 0 {
				at += expDuration(r, m.ThinkTime)
			}
			if at >= duration {
				break
			}
			turns = append(turns, chatTurn{at: at, user: m.UserLen.Sample(r), reply: m.ReplyLen.Sample(r)})
		}

		text := rngFor(seed, name, tagText, uint64(i))
		session := id("lora-chat-", i)
		var b strings.Builder
		b.WriteString(system)
		ends := make([]int, len(turns))
		for t, tu := range turns {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			writeWords(&b, text, tu.user)
			ends[t] = b.Len()
			if t < len(turns)-1 {
				b.WriteByte(' ')
				writeWords(&b, text, tu.reply) // the reply the next turn re-sends
			}
		}
		full := b.String()
		first := len(reqs)
		for t, tu := range turns {
			dep := -1
			if t > 0 {
				dep = first + t - 1
			}
			reqs = append(reqs, Request{At: tu.at, Session: session, Tenant: tenant, Adapter: adapter,
				Prompt: full[:ends[t]], MaxTokens: tu.reply, DependsOn: dep,
				Conversation: session, System: len(system), Lead: ends[0]})
		}
	})
	return finalize(reqs, duration)
}
