package workload

import (
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// ZipfTenantsWorkload is multi-tenant traffic with Zipf-skewed volume and
// one very hot tenant: each tenant's requests carry the tenant's own system
// prompt followed by a short unique query. It probes the tension between
// affinity and balance: hashing on the tenant keeps each tenant's prefix in
// one cache, but the hot tenant's replica is hot by construction.
//
// Arrivals are Poisson at rate; each request picks tenant k (0-based) with
// probability ∝ (k+1)^−S, except that tenant 0's share is set to HotShare
// and the others' shares are scaled to fill the rest. Session = Tenant =
// tenant id ("tenant-N").
type ZipfTenantsWorkload struct {
	// Tenants is the number of tenants. Default 50.
	Tenants int
	// S is the Zipf exponent of the tenants' request shares (measured
	// multi-tenant API traffic is Zipf-like with s near 1). Default 1.1,
	// which alone gives tenant 0 about 26% of 50 tenants' traffic.
	S float64
	// HotShare, if in (0, 1), overrides tenant 0's share of requests ("one
	// very hot tenant"); the other tenants keep their Zipf proportions.
	// 0 keeps the pure Zipf share. Default 0.30.
	HotShare float64
	// SystemPromptLen is each tenant's system prompt length. Default 1000.
	SystemPromptLen int
	// QueryLen is the length of each request's unique query. Default
	// log-normal, median 50, σ 0.6, clamped to 8–400.
	QueryLen LogNormal
	// OutputLen is each request's MaxTokens. Default log-normal, median 100,
	// σ 0.7, clamped to 8–512.
	OutputLen LogNormal
}

// ZipfTenants returns the Zipf-tenants workload with its defaults.
func ZipfTenants() *ZipfTenantsWorkload {
	return &ZipfTenantsWorkload{
		Tenants:         50,
		S:               1.1,
		HotShare:        0.30,
		SystemPromptLen: 1000,
		QueryLen:        LogNormal{Median: 50, Sigma: 0.6, Min: 8, Max: 400},
		OutputLen:       LogNormal{Median: 100, Sigma: 0.7, Min: 8, Max: 512},
	}
}

// Name is "zipf-tenants".
func (z *ZipfTenantsWorkload) Name() string { return "zipf-tenants" }

// Shares returns each tenant's expected share of requests (summing to 1).
func (z *ZipfTenantsWorkload) Shares() []float64 {
	n := max(z.Tenants, 1)
	w := make([]float64, n)
	sum := 0.0
	for k := range w {
		w[k] = math.Pow(float64(k+1), -z.S)
		sum += w[k]
	}
	if z.HotShare > 0 && z.HotShare < 1 && n > 1 {
		rest := sum - w[0]
		w[0] = z.HotShare
		for k := 1; k < n; k++ {
			w[k] *= (1 - z.HotShare) / rest
		}
		return w
	}
	for k := range w {
		w[k] /= sum
	}
	return w
}

// Generate implements [Generator].
func (z *ZipfTenantsWorkload) Generate(seed uint64, rate float64, duration time.Duration) []Request {
	if !validArgs(rate, duration) {
		return nil
	}
	const name = "zipf-tenants"
	shares := z.Shares()
	n := len(shares)
	cum := make([]float64, n)
	acc := 0.0
	for k, s := range shares {
		acc += s
		cum[k] = acc
	}
	sysLen := max(z.SystemPromptLen, 1)
	systems := sharedTexts(seed, name, n, func(*rand.Rand) int { return sysLen })
	ids := make([]string, n)
	for i := range ids {
		ids[i] = id("tenant-", i)
	}
	var reqs []Request
	poisson(rngFor(seed, name, tagArrivals, 0), rate, 0, duration, func(j int, at time.Duration) {
		r := rngFor(seed, name, tagSession, uint64(j))
		t := min(sort.SearchFloat64s(cum, r.Float64()*acc), n-1)
		q, out := z.QueryLen.Sample(r), z.OutputLen.Sample(r)
		reqs = append(reqs, Request{At: at, Session: ids[t], Tenant: ids[t],
			Prompt: joinWords(systems[t], r, q), MaxTokens: out, DependsOn: -1})
	})
	return finalize(reqs, duration)
}
