package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"

	"github.com/kvxds/kvxds/test/workload"
)

// TraceName is the workload name of a trace replay (Config.Trace).
const TraceName = "trace"

// messagesHead is what a chat body's messages value starts with, before
// the prompt text.
const messagesHead = `[{"role":"user","content":"`

// PrefixBytes is the prompt_prefix that covers the first blocks trace
// blocks of a chat body's messages: the messages head, then blocks of
// TraceBlockTokens pseudo-words (four letters and a space each), without
// the space after the last.
func PrefixBytes(blocks int) int {
	return len(messagesHead) + blocks*workload.TraceBlockTokens*5 - 1
}

// planTrace reads c.Trace (JSONL, plain or gzip-compressed) and scales its
// arrival times so that it offers c.Load of the fleet's capacity without
// reuse.
func planTrace(c Config) (*workloadPlan, error) {
	f, err := os.Open(c.Trace)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	recs, err := workload.ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", c.Trace, err)
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("trace %s: %d requests; need at least 2", c.Trace, len(recs))
	}
	var shape Shape
	largest := 0
	for _, r := range recs {
		shape.MeanPrompt += float64(r.InputLength)
		shape.MeanOutput += float64(max(r.OutputLength, 1))
		largest = max(largest, r.InputLength+r.OutputLength)
	}
	shape.MeanPrompt /= float64(len(recs))
	shape.MeanOutput /= float64(len(recs))
	bs := simConfig(1, 1).BlockSize
	kv := c.KVBlocks
	why := "set by --kv-blocks"
	if kv == 0 {
		// Room for the largest request twice over, and at least what the
		// chat workloads get.
		kv = max(4000, 2*((largest+bs-1)/bs))
		why = "twice the largest request of the trace, at least 4,000"
	}
	capacity := Capacity(simConfig(kv, 1), shape)
	if !(capacity > 0) {
		return nil, fmt.Errorf("trace: cannot calibrate the load (capacity %v)", capacity)
	}
	rate := c.Load * float64(c.Replicas) * capacity
	span := float64(recs[len(recs)-1].Timestamp-recs[0].Timestamp) / 1000
	if span <= 0 {
		span = 1
	}
	traceRate := float64(len(recs)-1) / span
	reqs, err := PrepareRequests(workload.TraceRequests(recs, rate/traceRate), false)
	if err != nil {
		return nil, err
	}
	scale := c.TimeScale
	if scale == 0 {
		scale = min(max(c.MessageBudget/(rate*max(shape.MeanOutput, 1)), 1), c.MaxTimeScale)
		scale = math.Round(scale*2) / 2
	}
	p := &workloadPlan{Name: TraceName, Shape: shape, Capacity: capacity, Load: c.Load, Rate: rate,
		KVBlocks: kv, KVWhy: why, TimeScale: scale, Duration: reqs[len(reqs)-1].At + 1, Requests: reqs,
		Warmup: int(c.WarmupFraction * float64(len(reqs))), Escape: c.Escape,
		MeanPrompt: shape.MeanPrompt, MeanOutput: shape.MeanOutput}
	return p, nil
}

// runTraceWorkload replays c.Trace: round robin (or least request)
// without keys, kvxds with the prompt_prefix key of each of
// c.PrefixBlocks and with the conversation key (deployed or, with
// c.Bare, bare), the index routers, and the upper bound.
func runTraceWorkload(ctx context.Context, c Config) (*WorkloadReport, error) {
	p, err := planTrace(c)
	if err != nil {
		return nil, err
	}
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "%s: %d requests from %s at %.2f req/s (load %.2f of %d × %.3f req/s), %d KV blocks per replica, time scale %g\n",
			TraceName, len(p.Requests), c.Trace, p.Rate, p.Load, c.Replicas, p.Capacity, p.KVBlocks, p.TimeScale)
	}
	wr := &WorkloadReport{Name: TraceName, DataPlane: c.DataPlane, Replicas: c.Replicas, Load: p.Load, Rate: p.Rate, Capacity: p.Capacity,
		KVBlocks: p.KVBlocks, KVWhy: p.KVWhy, TimeScale: p.TimeScale, Duration: p.Duration,
		Requests: len(p.Requests), Warmup: p.Warmup, MeanPrompt: p.MeanPrompt, MeanOutput: p.MeanOutput}
	for _, m := range c.Modes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		switch m {
		case UpperBound:
			wr.Modes = append(wr.Modes, UpperBoundResult(p.Requests, p.Warmup, c.Replicas*p.KVBlocks, simConfig(p.KVBlocks, 1).BlockSize, c.Replicas*c.MaxLoRA))
		case KVXDS, KVXDSPrefix:
			// A trace has no session ids: kvxds keys on the prompt
			// prefix, once when both modes are named.
			if m == KVXDS && slices.Contains(c.Modes, KVXDSPrefix) {
				continue
			}
			for _, blocks := range c.PrefixBlocks {
				q := withBodyKey(p, PrefixKey(PrefixBytes(blocks)))
				run, err := runLive(ctx, c, q, KVXDSPrefix, c.DataPlane)
				if err != nil {
					return nil, fmt.Errorf("%s, %s, %s: %w", TraceName, c.DataPlane, m, err)
				}
				res := summarize(KVXDSPrefix, q, run, c.Replicas)
				res.Mode = Mode(fmt.Sprintf("kvxds prompt_prefix=%d (%d block%s)%s", PrefixBytes(blocks), blocks, plural(blocks), bareLabel(c)))
				wr.Modes = append(wr.Modes, res)
				if c.Progress != nil {
					fmt.Fprintf(c.Progress, "%s: %d distinct prompt_prefix keys at %d block%s\n", TraceName, q.Sessions, blocks, plural(blocks))
				}
			}
		case KVXDSConversation:
			q := withBodyKey(p, ConversationKey())
			run, err := runLive(ctx, c, q, m, c.DataPlane)
			if err != nil {
				return nil, fmt.Errorf("%s, %s, %s: %w", TraceName, c.DataPlane, m, err)
			}
			res := summarize(m, q, run, c.Replicas)
			res.Mode += Mode(bareLabel(c))
			wr.Modes = append(wr.Modes, res)
			if c.Progress != nil {
				fmt.Fprintf(c.Progress, "%s: %d distinct conversation keys\n", TraceName, q.Sessions)
			}
		case RoundRobin, LeastRequest, Index, IndexLLMD:
			run, err := runLive(ctx, c, p, m, c.DataPlane)
			if err != nil {
				return nil, fmt.Errorf("%s, %s, %s: %w", TraceName, c.DataPlane, m, err)
			}
			wr.Modes = append(wr.Modes, summarize(m, p, run, c.Replicas))
		default:
			return nil, fmt.Errorf("%s: mode %s does not apply to a trace replay", TraceName, m)
		}
	}
	wr.Targets = Targets(wr)
	return wr, nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// bareLabel is what a kvxds mode's label adds when Config.Bare leaves its
// metrics, escape and weights blocks out.
func bareLabel(c Config) string {
	if c.Bare {
		return ", bare"
	}
	return ""
}
