package workload

import (
	"math/rand/v2"
	"strings"
	"time"
)

// SystemPromptWorkload is one hot system prompt: a long system prompt
// (an assistant's persona, rules and tools) fronts most conversations,
// the rest carry prompts of their own. It is the hot key of consistent
// hashing: a client that keys on its application, or a prompt_prefix key
// that reads only the system prompt, sends Shared of all requests to one
// replica, while the conversations under the prompt share nothing past
// it and could run anywhere the prompt is cached.
//
// Conversations are chat's (ChatWorkload): turn k re-sends turn k−1's
// prompt, its reply and a new user message; each conversation's first
// user message is its own. A conversation is under the shared prompt with
// probability Shared, so about Shared of the requests are.
//
// Session = Tenant = the application: "app-0" under the shared prompt,
// "app-N" (N ≥ 1, one per conversation) for a conversation with its own
// prompt. Conversation = "conv-N". System and Lead mark the chat
// structure, so the conversation key (package bodykey) tells the
// conversations under the shared prompt apart.
type SystemPromptWorkload struct {
	// Shared is the probability that a conversation starts with the
	// shared system prompt. Default 0.9.
	Shared float64
	// SystemPromptLen is the shared system prompt's length. Default
	// 2,000.
	SystemPromptLen int
	// OwnPromptLen is the length of a conversation's own system prompt.
	// Default uniform 200–500 (chat-apps').
	OwnPromptLen UniformInt
	// Turns, UserLen, ReplyLen and ThinkTime are as in chat, with chat's
	// defaults.
	Turns             Geometric
	UserLen, ReplyLen LogNormal
	ThinkTime         time.Duration
	// Warmup starts conversations at −Warmup (see ChatWorkload.Warmup).
	Warmup time.Duration
}

// SystemPrompt returns the hot-system-prompt workload with its defaults.
func SystemPrompt() *SystemPromptWorkload {
	c := Chat()
	return &SystemPromptWorkload{
		Shared:          0.9,
		SystemPromptLen: 2000,
		OwnPromptLen:    UniformInt{Min: 200, Max: 500},
		Turns:           c.Turns,
		UserLen:         c.UserLen,
		ReplyLen:        c.ReplyLen,
		ThinkTime:       c.ThinkTime,
	}
}

// Name is "system-prompt".
func (w *SystemPromptWorkload) Name() string { return "system-prompt" }

// SharedApp is the session key (the application) of the conversations
// under the shared system prompt.
const SharedApp = "app-0"

// Generate implements [Generator].
func (w *SystemPromptWorkload) Generate(seed uint64, rate float64, duration time.Duration) []Request {
	if !validArgs(rate, duration) {
		return nil
	}
	const name = "system-prompt"
	shared := sharedTexts(seed, name, 1, func(*rand.Rand) int { return max(w.SystemPromptLen, 1) })[0]
	var reqs []Request
	var turns []chatTurn
	poisson(rngFor(seed, name, tagArrivals, 0), rate/w.Turns.Expected(), -max(w.Warmup, 0), duration, func(i int, start time.Duration) {
		r := rngFor(seed, name, tagSession, uint64(i))
		own := r.Float64() >= w.Shared
		ownLen := w.OwnPromptLen.Sample(r)
		n := w.Turns.Sample(r)
		turns = turns[:0]
		at := start
		for k := 0; k < n; k++ {
			if k > 0 {
				at += expDuration(r, w.ThinkTime)
			}
			if at >= duration {
				break
			}
			turns = append(turns, chatTurn{at: at, user: w.UserLen.Sample(r), reply: w.ReplyLen.Sample(r)})
		}
		if len(turns) == 0 {
			return
		}
		text := rngFor(seed, name, tagText, uint64(i))
		system, app := shared, SharedApp
		if own {
			system, app = Words(text, max(ownLen, 1)), id("app-", i+1)
		}
		var b strings.Builder
		b.WriteString(system)
		first := len(reqs)
		ends := make([]int, len(turns))
		for k, t := range turns {
			b.WriteByte(' ')
			writeWords(&b, text, t.user)
			ends[k] = b.Len()
			if k < len(turns)-1 {
				b.WriteByte(' ')
				writeWords(&b, text, t.reply)
			}
		}
		full := b.String()
		conv := id("conv-", i)
		for k, t := range turns {
			dep := -1
			if k > 0 {
				dep = first + k - 1
			}
			reqs = append(reqs, Request{At: t.at, Session: app, Tenant: app, Prompt: full[:ends[k]],
				MaxTokens: t.reply, DependsOn: dep, Conversation: conv, System: len(system), Lead: ends[0]})
		}
	})
	return finalize(reqs, duration)
}
