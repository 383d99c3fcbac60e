package sim

import (
	"testing"
	"time"
)

// BenchmarkSchedulerStep measures the simulator's own CPU per simulated
// request, engine only (scheduler, KV cache, block hashing, metrics), on
// SGLang's generated-shared-prefix shape: 16 groups sharing a 2,048-token
// system prompt, a 128-token question each, 256 output tokens, arriving at
// 30 requests per simulated second (≈ 150 running at once). One op is one
// request. sim-s/cpu-s is how many simulated seconds one core can run: the
// largest TimeScale a replica can keep up with under this load.
func BenchmarkSchedulerStep(b *testing.B) {
	const (
		groups   = 16
		system   = 2048
		question = 128
		output   = 256
		rate     = 30.0
	)
	cfg := DefaultConfig()
	e := newEngine(cfg, newMetrics(cfg, nil))
	prefixes := make([][]int, groups)
	for g := range prefixes {
		prefixes[g] = seq(g*system, system)
	}
	newRequest := func(i int) *request {
		prompt := append(append(make([]int, 0, system+question+output), prefixes[i%groups]...), seq(7919*i, question)...)
		return &request{
			tokens:    prompt,
			hashes:    AppendBlockHashes(make([]BlockHash, 0, (system+question+output)/16+1), prompt, cfg.BlockSize),
			promptLen: len(prompt),
			maxTokens: output,
			seed:      promptSeed(prompt),
			arrival:   float64(i) / rate,
			out:       newOutput(len(prompt)),
		}
	}

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	next, steps := 0, 0
	for {
		for next < b.N && float64(next)/rate <= e.now {
			q := newRequest(next)
			e.enqueue(q)
			next++
		}
		if !e.plan() {
			if next == b.N {
				break
			}
			q := newRequest(next) // idle: the next arrival wakes the engine
			e.enqueue(q)
			next++
			continue
		}
		e.complete()
		steps++
		// Drain outputs as a handler would, so they do not pile up.
		for _, q := range e.running {
			q.out.mu.Lock()
			q.out.words = q.out.words[:0]
			q.out.mu.Unlock()
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	s := e.snapshot()
	if s.RequestsDone != int64(b.N) {
		b.Fatalf("done %d of %d", s.RequestsDone, b.N)
	}
	b.ReportMetric(float64(steps)/float64(b.N), "steps/req")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(steps), "ns/step")
	b.ReportMetric(s.SimTime/elapsed.Seconds(), "sim-s/cpu-s")
	b.ReportMetric(s.HitRate(), "hit-rate")
}
