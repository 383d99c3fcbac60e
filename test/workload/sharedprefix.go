package workload

import (
	"math/rand/v2"
	"time"
)

// SharedPrefixWorkload is the shape of SGLang's generated-shared-prefix
// ("gsp") benchmark: Groups groups of PromptsPerGroup prompts, where every
// prompt of a group is the group's long system prompt followed by its own
// question. It is the cleanest test of whether a router keeps a group's
// requests where the group's prefix is cached.
//
// Arrivals are Poisson at rate. Requests are dealt in rounds of
// Groups × PromptsPerGroup: each round sends every (group, prompt) slot once,
// in a random order that interleaves the groups. If the horizon holds more
// than one round, later rounds reuse the groups' system prompts with fresh
// questions, so a repeat is a shared-prefix hit, never an unrealistic
// whole-prompt hit.
//
// Session = Tenant = group id ("group-N"): a group stands for one
// application or user whose requests all carry the same system prompt, the
// case where a client-sent session/tenant key is the right hash key, so each
// group maps to one replica. (Content-hashing routers would derive the same
// key from the first blocks of the prompt.)
//
// With the defaults the shared working set is 64 × 2,048 = 131,072 tokens,
// which fits in one H100 replica's KV cache (≈ 467k tokens for an 8B model):
// random routing then also hits once every replica has seen every group. Raise
// Groups (or SystemPromptLen) until the working set exceeds a replica's cache
// to see the routing win.
type SharedPrefixWorkload struct {
	// Groups is the number of distinct shared prefixes. Default 64 (SGLang).
	Groups int
	// PromptsPerGroup is the number of prompts per group per round.
	// Default 16 (SGLang).
	PromptsPerGroup int
	// SystemPromptLen is the length of each group's shared system prompt.
	// Default 2048 (SGLang).
	SystemPromptLen int
	// QuestionLen is the length of each prompt's unique question. Default
	// 128 (SGLang).
	QuestionLen int
	// OutputLen is every request's MaxTokens. Default 256 (SGLang).
	OutputLen int
}

// SharedPrefix returns the generated-shared-prefix workload with SGLang's
// defaults: 64 groups × 16 prompts, 2,048-token system prompt, 128-token
// question, 256-token output.
func SharedPrefix() *SharedPrefixWorkload {
	return &SharedPrefixWorkload{
		Groups:          64,
		PromptsPerGroup: 16,
		SystemPromptLen: 2048,
		QuestionLen:     128,
		OutputLen:       256,
	}
}

// Name is "shared-prefix".
func (s *SharedPrefixWorkload) Name() string { return "shared-prefix" }

// Generate implements [Generator].
func (s *SharedPrefixWorkload) Generate(seed uint64, rate float64, duration time.Duration) []Request {
	if !validArgs(rate, duration) {
		return nil
	}
	const name = "shared-prefix"
	groups, per := max(s.Groups, 1), max(s.PromptsPerGroup, 1)
	sysLen, qLen, out := max(s.SystemPromptLen, 1), max(s.QuestionLen, 1), max(s.OutputLen, 1)
	systems := sharedTexts(seed, name, groups, func(*rand.Rand) int { return sysLen })
	groupIDs := make([]string, groups)
	for i := range groupIDs {
		groupIDs[i] = id("group-", i)
	}
	slots := groups * per

	var reqs []Request
	round, perm := -1, []int(nil)
	poisson(rngFor(seed, name, tagArrivals, 0), rate, 0, duration, func(j int, at time.Duration) {
		if j/slots != round {
			round = j / slots
			perm = rngFor(seed, name, tagRound, uint64(round)).Perm(slots)
		}
		slot := perm[j%slots]
		g := slot / per
		text := rngFor(seed, name, tagText, uint64(round*slots+slot))
		reqs = append(reqs, Request{At: at, Session: groupIDs[g], Tenant: groupIDs[g],
			Prompt: joinWords(systems[g], text, qLen), MaxTokens: out, DependsOn: -1})
	})
	return finalize(reqs, duration)
}
