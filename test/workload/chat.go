package workload

import (
	"cmp"
	"strings"
	"time"
)

// ChatWorkload is multi-turn chat, the longest prefix match in LLM traffic:
// turn k's prompt is turn k−1's prompt plus the assistant's reply plus the
// new user message, so a replica that served turn k−1 holds all of turn k's
// prompt but the last user message in its prefix cache.
//
// By default ([Chat]) a conversation has no system prompt, as in
// ShareGPT-style data, and turn k's prompt is
//
//	user₀ ␣ reply₀ ␣ user₁ ␣ … ␣ reply_{k−1} ␣ user_k
//
// so different conversations share no prefix at all. With Apps > 0
// ([ChatApps], "chat-apps") each conversation belongs to one of Apps
// applications and starts with that app's system prompt,
//
//	system ␣ user₀ ␣ reply₀ ␣ user₁ ␣ … ␣ reply_{k−1} ␣ user_k
//
// so conversations of one app also share a few hundred tokens: a mix of
// chat and shared-prefix traffic (with the defaults, about 22% of all
// prompt tokens are system prompts).
//
// reply_j is MaxTokens_j pseudo-words defined by the workload itself (the
// replica's real output is ignored, which keeps the stream identical under
// every routing mode). Turn k depends on turn k−1 (DependsOn) and its At is
// turn k−1's At plus an exponential think time: a lower bound, since the
// load generator also waits for turn k−1 to complete.
//
// Session = conversation id ("chat-N"); Tenant = app id ("app-N"), or the
// conversation id when Apps is 0.
//
// Conversations start as a Poisson process at rate / Turns.Expected(), so
// the long-run request rate is rate. Lengths are in tokens (words). Both
// variants draw from the same seeded streams: for the same seed, parameters
// and a power-of-two Apps (the default 4), chat-apps is chat with a system
// prompt in front of every conversation, turn for turn.
//
// Defaults follow the shape of ShareGPT-style chat data used by the vLLM and
// SGLang serving benchmarks (no system prompt, a few turns per conversation
// with a long tail, user messages of tens of tokens with occasional pastes,
// replies of a few hundred tokens); the exact numbers are the kvxds
// benchmark's choice.
type ChatWorkload struct {
	// Apps is the number of distinct applications, each with its own system
	// prompt; a conversation picks one uniformly. 0 (the default of Chat):
	// no system prompt. ChatApps: 4.
	Apps int
	// SystemPromptLen is each app's system prompt length, drawn once per
	// app; unused when Apps is 0. Default uniform 200–500 (typical
	// assistant persona + rules).
	SystemPromptLen UniformInt
	// Turns is the number of user turns (= requests) per conversation.
	// Default geometric with mean 5 capped at 20 (truncated mean ≈ 4.94),
	// ShareGPT-like.
	Turns Geometric
	// UserLen is the length of each user message. Default log-normal,
	// median 60, σ 1.0, clamped to 4–1024 (mean ≈ 100; the tail is pasted
	// text).
	UserLen LogNormal
	// ReplyLen is each turn's MaxTokens, and the length of the reply text the
	// next turn carries. Default log-normal, median 150, σ 0.8, clamped to
	// 8–512.
	ReplyLen LogNormal
	// ThinkTime is the mean of the exponential time between a turn's arrival
	// and the next turn's earliest send time (user reading and typing,
	// compressed for a benchmark). Default 5s.
	ThinkTime time.Duration
	// Stateless drops Session: the client sends no session id, as most
	// OpenAI-compatible clients do (ChatStateless). Conversation, System
	// and Lead are set either way.
	Stateless bool
	// Warmup starts conversations at −Warmup instead of 0, keeping only
	// requests with At >= 0, so the stream begins in steady state. A
	// request whose previous turn arrived before 0 has DependsOn −1 but still
	// carries the full history. Default 0 (every conversation starts at its
	// first turn).
	Warmup time.Duration

	name string // Name(); "" is "chat"
}

type chatTurn struct {
	at          time.Duration
	user, reply int
}

// Chat returns the multi-turn chat workload with its defaults: no system
// prompt (Apps 0).
func Chat() *ChatWorkload {
	return &ChatWorkload{
		SystemPromptLen: UniformInt{Min: 200, Max: 500}, // used only if Apps is set
		Turns:           Geometric{Mean: 5, Max: 20},
		UserLen:         LogNormal{Median: 60, Sigma: 1.0, Min: 4, Max: 1024},
		ReplyLen:        LogNormal{Median: 150, Sigma: 0.8, Min: 8, Max: 512},
		ThinkTime:       5 * time.Second,
	}
}

// ChatApps returns chat with system prompts, named "chat-apps": Chat's
// defaults plus 4 apps with system prompts of uniform 200–500 tokens.
func ChatApps() *ChatWorkload {
	c := Chat()
	c.Apps = 4
	c.name = "chat-apps"
	return c
}

// ChatStateless returns chat with no session id, named "chat-stateless":
// Chat's conversations, turn for turn and byte for byte, without Session.
func ChatStateless() *ChatWorkload {
	c := Chat()
	c.Stateless = true
	c.name = "chat-stateless"
	return c
}

// Name is "chat", or "chat-apps" for [ChatApps], "chat-stateless" for
// [ChatStateless].
func (c *ChatWorkload) Name() string { return cmp.Or(c.name, "chat") }

// Generate implements [Generator].
func (c *ChatWorkload) Generate(seed uint64, rate float64, duration time.Duration) []Request {
	if !validArgs(rate, duration) {
		return nil
	}
	// Both variants use the "chat" streams (see the type's documentation).
	const name = "chat"
	apps := max(c.Apps, 0)
	systems := sharedTexts(seed, name, apps, c.SystemPromptLen.Sample)
	appIDs := make([]string, apps)
	for i := range appIDs {
		appIDs[i] = id("app-", i)
	}

	var reqs []Request
	var turns []chatTurn
	arrivals := rngFor(seed, name, tagArrivals, 0)
	poisson(arrivals, rate/c.Turns.Expected(), -max(c.Warmup, 0), duration, func(i int, start time.Duration) {
		// Structure first (from its own stream), so the text is written once
		// into a buffer of the exact size and truncation at the horizon
		// changes nothing about the turns that are kept.
		r := rngFor(seed, name, tagSession, uint64(i))
		// Drawn even without apps (IntN(1) is one draw, like IntN(4)),
		// so that both variants share their turns.
		app := r.IntN(max(apps, 1))
		n := c.Turns.Sample(r)
		turns = turns[:0]
		system, tenant := "", ""
		if apps > 0 {
			system, tenant = systems[app], appIDs[app]
		}
		size := len(system)
		at := start
		for k := 0; k < n; k++ {
			if k > 0 {
				at += expDuration(r, c.ThinkTime)
			}
			if at >= duration {
				break
			}
			turns = append(turns, chatTurn{at: at, user: c.UserLen.Sample(r), reply: c.ReplyLen.Sample(r)})
		}
		for k, t := range turns {
			size += 5 * t.user
			if k < len(turns)-1 {
				size += 5 * t.reply
			}
		}

		text := rngFor(seed, name, tagText, uint64(i))
		session := id("chat-", i)
		if apps == 0 {
			tenant = session
		}
		var b strings.Builder
		b.Grow(size)
		b.WriteString(system)
		first := len(reqs)
		ends := make([]int, len(turns))
		for k, t := range turns {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			writeWords(&b, text, t.user)
			ends[k] = b.Len()
			if k < len(turns)-1 {
				b.WriteByte(' ')
				writeWords(&b, text, t.reply) // the reply the next turn re-sends
			}
		}
		full := b.String()
		key := session
		if c.Stateless {
			key = ""
		}
		for k, t := range turns {
			dep := -1
			if k > 0 {
				dep = first + k - 1
			}
			reqs = append(reqs, Request{At: t.at, Session: key, Tenant: tenant,
				Prompt: full[:ends[k]], MaxTokens: t.reply, DependsOn: dep,
				Conversation: session, System: len(system), Lead: ends[0]})
		}
	})
	return finalize(reqs, duration)
}
