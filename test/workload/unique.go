package workload

import (
	"time"
)

// UniqueShortWorkload is the negative control: short prompts with no shared
// prefix at all (not even a system prompt), so prefix-aware routing has
// nothing to win and should cost nothing. Expect equal hit rates (≈ 0) and
// latency across routing modes; a difference is overhead or imbalance.
//
// Arrivals are Poisson at rate. These are single-shot API calls, which carry
// no session header: Session is "" (no hash key), so a session-hashing
// router routes them by its keyless fallback (in kvxds, the pool's
// hash.keyless balancer, round robin by default). Tenant is a unique id per
// request ("u-N").
type UniqueShortWorkload struct {
	// PromptLen is each prompt's length. Default uniform 50–150.
	PromptLen UniformInt
	// OutputLen is each request's MaxTokens. Default log-normal, median 100,
	// σ 0.6, clamped to 8–256.
	OutputLen LogNormal
}

// UniqueShort returns the negative-control workload with its defaults.
func UniqueShort() *UniqueShortWorkload {
	return &UniqueShortWorkload{
		PromptLen: UniformInt{Min: 50, Max: 150},
		OutputLen: LogNormal{Median: 100, Sigma: 0.6, Min: 8, Max: 256},
	}
}

// Name is "unique-short".
func (u *UniqueShortWorkload) Name() string { return "unique-short" }

// Generate implements [Generator].
func (u *UniqueShortWorkload) Generate(seed uint64, rate float64, duration time.Duration) []Request {
	if !validArgs(rate, duration) {
		return nil
	}
	const name = "unique-short"
	var reqs []Request
	poisson(rngFor(seed, name, tagArrivals, 0), rate, 0, duration, func(j int, at time.Duration) {
		r := rngFor(seed, name, tagSession, uint64(j))
		n, out := max(u.PromptLen.Sample(r), 1), u.OutputLen.Sample(r)
		reqs = append(reqs, Request{At: at, Tenant: id("u-", j),
			Prompt: Words(r, n), MaxTokens: out, DependsOn: -1})
	})
	return finalize(reqs, duration)
}
