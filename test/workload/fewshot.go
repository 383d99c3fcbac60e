package workload

import (
	"time"
)

// FewShotWorkload is few-shot prompting: a handful of task templates
// (classification, extraction, formatting...) each carrying an instruction
// and worked examples that are identical across calls, followed by a short
// query. Every call of a template shares the template's 1–2k-token prefix.
//
// Arrivals are Poisson at rate; each request picks a template uniformly.
// Session = Tenant = template id ("fewshot-N"): the template is what a
// caller would put in the affinity key.
type FewShotWorkload struct {
	// Templates is the number of distinct task templates. Default 8.
	Templates int
	// ExamplesLen is each template's instruction-plus-examples length, drawn
	// once per template. Default uniform 1000–2000 (a few to a dozen
	// examples).
	ExamplesLen UniformInt
	// QueryLen is the length of each call's own input. Default log-normal,
	// median 40, σ 0.5, clamped to 8–200.
	QueryLen LogNormal
	// OutputLen is each call's MaxTokens: a label or a short structured
	// answer. Default log-normal, median 20, σ 0.7, clamped to 1–128.
	OutputLen LogNormal
}

// FewShot returns the few-shot workload with its defaults.
func FewShot() *FewShotWorkload {
	return &FewShotWorkload{
		Templates:   8,
		ExamplesLen: UniformInt{Min: 1000, Max: 2000},
		QueryLen:    LogNormal{Median: 40, Sigma: 0.5, Min: 8, Max: 200},
		OutputLen:   LogNormal{Median: 20, Sigma: 0.7, Min: 1, Max: 128},
	}
}

// Name is "few-shot".
func (f *FewShotWorkload) Name() string { return "few-shot" }

// Generate implements [Generator].
func (f *FewShotWorkload) Generate(seed uint64, rate float64, duration time.Duration) []Request {
	if !validArgs(rate, duration) {
		return nil
	}
	const name = "few-shot"
	n := max(f.Templates, 1)
	templates := sharedTexts(seed, name, n, f.ExamplesLen.Sample)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = id("fewshot-", i)
	}
	var reqs []Request
	poisson(rngFor(seed, name, tagArrivals, 0), rate, 0, duration, func(j int, at time.Duration) {
		r := rngFor(seed, name, tagSession, uint64(j))
		t := r.IntN(n)
		q, out := f.QueryLen.Sample(r), f.OutputLen.Sample(r)
		reqs = append(reqs, Request{At: at, Session: ids[t], Tenant: ids[t],
			Prompt: joinWords(templates[t], r, q), MaxTokens: out, DependsOn: -1})
	})
	return finalize(reqs, duration)
}
