package bench

import (
	"math"
	"slices"
	"time"

	"github.com/kvxds/kvxds/test/sim"
)

// Quantiles are the p50, p95 and p99 of a latency, in simulated seconds
// (NaN without data).
type Quantiles struct {
	P50, P95, P99 float64
}

// ModeResult is one mode's measurements on one workload. Every statistic
// but Requests, Failed and SessionsMoved covers only the measured requests
// (after the warm-up); times and rates are in simulated seconds.
type ModeResult struct {
	Mode Mode

	// Requests is the number of requests replayed; Measured of them count.
	Requests, Measured int
	// Failed counts requests that did not stream all their tokens (whole
	// run).
	Failed int

	// HitRate is Σ vllm:prefix_cache_hits_total / Σ
	// vllm:prefix_cache_queries_total over the replicas' own counters,
	// increase over the measured part (UpperBound: the offline replay).
	HitRate              float64
	HitTokens, QueryToks float64
	// ClientHitRate is Σ x-cached-tokens / Σ x-prompt-tokens from the
	// responses' trailers: the same quantity seen by the clients.
	ClientHitRate float64

	// ClientTTFT is send to first streamed message at the client, wall
	// time × time scale. EngineTTFT is from the replicas' merged
	// vllm:time_to_first_token_seconds histograms (increase over the
	// measured part), interpolated like histogram_quantile.
	ClientTTFT, EngineTTFT Quantiles
	// TTFTOverhead is the mean of client TTFT minus the engine's own
	// TTFT of the same request (trailer x-ttft-seconds): gRPC, xDS
	// routing and scheduling delay of the harness, in simulated seconds.
	TTFTOverhead float64

	// Throughput: requests completed, and their streamed tokens, per
	// simulated second over the measured window, from the first measured
	// arrival to the last arrival (the drain after it is left out).
	ReqPerSec, TokPerSec float64

	// QueueMean and QueueMax are each replica's mean and max queue depth
	// (requests waiting or running in its engine), sampled every
	// SampleEvery from the first measured arrival to the last arrival.
	QueueMean []float64
	QueueMax  []int
	// Balance is max over replicas of QueueMean / mean over replicas of
	// QueueMean: 1 is perfect balance, N means one replica holds it all.
	Balance float64
	// KVMean is the fleet's mean KV usage over the same samples.
	KVMean float64

	// SessionsMoved counts sessions whose successful requests landed on
	// more than one replica, of MultiSessions sessions with at least two.
	// A request without a session belongs to its conversation (a client
	// that sends no session id), else to none.
	SessionsMoved, MultiSessions int
	// Preemptions is the increase of vllm:num_preemptions_total.
	Preemptions float64
	// SwapIns is the increase of sim:lora_swap_ins_total (adapters loaded
	// into a slot), SwapInsPer1k the same per 1,000 measured requests.
	SwapIns, SwapInsPer1k float64
	// SlotWaitsPer1k is the measured part's requests admitted after being
	// passed over for an adapter slot (sim:lora_slot_waits_total) per
	// 1,000 measured requests, SlotWait their mean wait in seconds (NaN
	// without any).
	SlotWaitsPer1k, SlotWait float64
	// AdapterSpread is the mean, over the measured requests under an
	// adapter, of the number of replicas their adapter's measured
	// requests ran on (NaN without adapters): how widely each adapter,
	// weighted by its traffic, is spread.
	AdapterSpread float64
	// Escapes counts replicas taken out of the hash table by kvxds and
	// WeightMoves changes of a replica's weight (KVXDSWeights).
	Escapes, WeightMoves int

	// Wall is the dispatch's wall time; CPU the process's CPU time over it,
	// and CPUCores their ratio (cores busy on average).
	Wall     time.Duration
	CPU      time.Duration
	CPUCores float64
	// MachineCores is the whole machine's busy CPU time (all processes,
	// /proc/stat) over Wall: when it nears the core count, the simulator
	// falls behind the wall clock and the timings are distorted. NaN where
	// unknown.
	MachineCores float64

	// PD holds a prefill/decode mode's own figures; nil elsewhere.
	PD *PDResult

	// Series is the queue-depth time series (simulated seconds) for the
	// charts; nil for UpperBound.
	Series []Sample `json:"-"`
	Policy string   `json:"-"`
}

// quantile is the q-quantile of sorted xs with linear interpolation
// between order statistics (NaN if empty).
func quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	pos := q * float64(n-1)
	i := int(math.Floor(pos))
	if i >= n-1 {
		return sorted[n-1]
	}
	f := pos - float64(i)
	return sorted[i] + f*(sorted[i+1]-sorted[i])
}

func quantiles(xs []float64) Quantiles {
	s := slices.Clone(xs)
	slices.Sort(s)
	return Quantiles{P50: quantile(s, 0.5), P95: quantile(s, 0.95), P99: quantile(s, 0.99)}
}

func histQuantiles(h Histogram) Quantiles {
	return Quantiles{P50: h.Quantile(0.5), P95: h.Quantile(0.95), P99: h.Quantile(0.99)}
}

func nan() float64 { return math.NaN() }

// summarize turns a live run into a ModeResult.
func summarize(mode Mode, w *workloadPlan, run *liveRun, replicas int) ModeResult {
	scale := w.TimeScale
	simSec := func(d time.Duration) float64 { return d.Seconds() * scale }
	m := ModeResult{Mode: mode, Requests: len(run.Results), Measured: len(run.Results) - w.Warmup,
		Wall: run.Wall, CPU: run.CPU, Escapes: run.Escapes, WeightMoves: run.WeightMoves, Policy: run.Policy}
	m.MachineCores = nan()
	if run.Wall > 0 {
		m.CPUCores = run.CPU.Seconds() / run.Wall.Seconds()
		if run.MachineCPU >= 0 {
			m.MachineCores = run.MachineCPU.Seconds() / run.Wall.Seconds()
		}
	}

	// Engine counters over the measured part.
	d := run.After.Sub(run.Before)
	m.HitRate, m.HitTokens, m.QueryToks = d.HitRate(), d.PrefixHits, d.PrefixQueries
	m.EngineTTFT = histQuantiles(d.TTFT)
	m.Preemptions = d.Preemptions
	m.SwapIns = d.LoRASwapIns
	m.SlotWait = math.NaN()
	if d.LoRASlotWaits > 0 {
		m.SlotWait = d.LoRASlotWaitSeconds / d.LoRASlotWaits
	}
	if m.Measured > 0 {
		m.SwapInsPer1k = 1000 * m.SwapIns / float64(m.Measured)
		m.SlotWaitsPer1k = 1000 * d.LoRASlotWaits / float64(m.Measured)
	}
	m.AdapterSpread = adapterSpread(w.Requests[w.Warmup:], run.Results[w.Warmup:])

	// Client side.
	var ttft []float64
	var overhead float64
	var nOver int
	var prompt, cached float64
	var doneInWindow, tokensInWindow int
	sessions := map[string]map[string]bool{}
	for i, r := range run.Results {
		if r.Err != nil {
			m.Failed++
			continue
		}
		if s := sessionOf(&w.Requests[i]); s != "" {
			if sessions[s] == nil {
				sessions[s] = map[string]bool{}
			}
			sessions[s][r.Replica] = true
		}
		if r.Done >= run.Boundary && r.Done <= run.LastArrival {
			doneInWindow++
			tokensInWindow += r.Tokens
		}
		if i < w.Warmup {
			continue
		}
		prompt += float64(r.PromptTokens)
		cached += float64(r.CachedTokens)
		if r.First >= 0 {
			t := simSec(r.First - r.Sent)
			ttft = append(ttft, t)
			if !math.IsNaN(r.EngineTTFT) {
				overhead += t - r.EngineTTFT
				nOver++
			}
		}
	}
	m.ClientTTFT = quantiles(ttft)
	if nOver > 0 {
		m.TTFTOverhead = overhead / float64(nOver)
	}
	if prompt > 0 {
		m.ClientHitRate = cached / prompt
	}
	if span := simSec(run.LastArrival - run.Boundary); span > 0 {
		m.ReqPerSec = float64(doneInWindow) / span
		m.TokPerSec = float64(tokensInWindow) / span
	}
	counts := map[string]int{}
	for i := range w.Requests {
		if s := sessionOf(&w.Requests[i]); s != "" {
			counts[s]++
		}
	}
	for s, n := range counts {
		if n < 2 {
			continue
		}
		m.MultiSessions++
		if len(sessions[s]) > 1 {
			m.SessionsMoved++
		}
	}

	// Queue depth over [first measured arrival, last arrival].
	m.QueueMean = make([]float64, replicas)
	m.QueueMax = make([]int, replicas)
	n, kv := 0, 0.0
	for _, s := range run.Samples {
		if s.At < run.Boundary || s.At > run.LastArrival {
			continue
		}
		n++
		for i, q := range s.Depth {
			m.QueueMean[i] += float64(q)
			m.QueueMax[i] = max(m.QueueMax[i], q)
			kv += s.KV[i]
		}
	}
	if n > 0 {
		sum, hi := 0.0, 0.0
		for i := range m.QueueMean {
			m.QueueMean[i] /= float64(n)
			sum += m.QueueMean[i]
			hi = max(hi, m.QueueMean[i])
		}
		if sum > 0 {
			m.Balance = hi / (sum / float64(replicas))
		}
		m.KVMean = kv / float64(n*replicas)
	}
	m.Series = run.Samples
	return m
}

// UpperBoundResult replays the prompts in arrival order through one
// sim.Cache of blocks blocks: each prompt is looked up as the engine does
// (never its last token), then the prompt and the tokens the engine would
// generate for it (all but the last, whose KV is never computed) are
// inserted. Only requests from warm on are counted. Sessions play no part:
// the bound is the same with or without them. When requests name LoRA
// adapters, its swap-ins are the floor of a fleet of slots adapter slots
// (SwapInFloor).
func UpperBoundResult(reqs []Request, warm, blocks, blockSize, slots int) ModeResult {
	hits, queries := replayHits(reqs, warm, blocks, blockSize, true)
	m := ModeResult{Mode: UpperBound, Requests: len(reqs), Measured: len(reqs) - warm,
		HitTokens: hits, QueryToks: queries, SwapIns: nan(), SwapInsPer1k: nan(), AdapterSpread: nan(),
		ClientTTFT: Quantiles{nan(), nan(), nan()}, EngineTTFT: Quantiles{nan(), nan(), nan()},
		TTFTOverhead: nan(), ClientHitRate: nan(), ReqPerSec: nan(), TokPerSec: nan(), Balance: nan(), KVMean: nan(),
		MachineCores: nan()}
	if queries > 0 {
		m.HitRate = hits / queries
		m.ClientHitRate = m.HitRate
	}
	if slices.ContainsFunc(reqs, func(r Request) bool { return r.Adapter != "" }) {
		m.SwapIns = float64(SwapInFloor(reqs, warm, slots))
		if m.Measured > 0 {
			m.SwapInsPer1k = 1000 * m.SwapIns / float64(m.Measured)
		}
	}
	return m
}

// replayHits replays the prompts in arrival order through one sim.Cache
// of blocks blocks, each looked up as the engine does (never its last
// token) and then inserted, with the tokens the engine would generate for
// it if withReply (all but the last, whose KV is never computed). It
// returns the hit and looked-up tokens of the requests from warm on.
func replayHits(reqs []Request, warm, blocks, blockSize int, withReply bool) (hits, queries float64) {
	c := sim.NewCache(blocks, blockSize)
	for i, r := range reqs {
		t := sim.Tokenize(r.Prompt)
		if len(t) == 0 {
			continue
		}
		h := c.Lookup(t[:len(t)-1])
		if i >= warm {
			hits += float64(h)
			queries += float64(len(t))
		}
		if withReply {
			gen := sim.Tokenize(sim.OutputText(t, r.MaxTokens))
			t = append(t, gen[:max(len(gen)-1, 0)]...)
		}
		c.Insert(t)
	}
	return hits, queries
}

// sessionOf is what SessionsMoved follows for r: its session key, else
// its conversation.
func sessionOf(r *Request) string {
	if r.Session != "" {
		return r.Session
	}
	return r.Conversation
}

// adapterSpread is ModeResult.AdapterSpread of the requests reqs and
// their results res (same length; failed requests left out).
func adapterSpread(reqs []Request, res []reqResult) float64 {
	on := map[string]map[string]bool{}
	n := map[string]int{}
	for i := range reqs {
		a := reqs[i].Adapter
		if a == "" || res[i].Err != nil || res[i].Replica == "" {
			continue
		}
		if on[a] == nil {
			on[a] = map[string]bool{}
		}
		on[a][res[i].Replica] = true
		n[a]++
	}
	total, sum := 0, 0.0
	for a, k := range n {
		total += k
		sum += float64(k * len(on[a]))
	}
	if total == 0 {
		return math.NaN()
	}
	return sum / float64(total)
}
