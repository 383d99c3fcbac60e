package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/kvxds/kvxds/test/sim"
	"github.com/kvxds/kvxds/test/workload"
)

// Request is one workload request ready to send.
type Request struct {
	workload.Request
	// Tokens is the prompt's length under sim.Tokenize.
	Tokens int
	// Body is the gRPC payload: sim.GenerateRequest as JSON.
	Body []byte
	// Spread is the spread sub-key a gRPC client sends in SpreadHeader
	// (withSpreads); "" sends none.
	Spread string
}

// PrepareRequests turns a workload stream into requests ready to send.
//
// With echo set, a dependent request whose prompt is its dependency's (or,
// for a branch that edits a message, an earlier request's of the
// dependency chain) prompt, a space, its MaxTokens reply words and the rest
// (chat turns and agent steps are built that way) gets those reply words
// replaced by the text the simulated engine generates for the dependency's
// (already rewritten) prompt, sim.OutputText: the next turn then re-sends
// what the replica really answered, as a chat client or an agent does, and
// can hit the generated tokens' KV blocks, as in vLLM. The simulated output
// is a function of the prompt alone, so every mode still replays the
// byte-identical sequence. Token counts are unchanged (a reply word is one
// token either way).
func PrepareRequests(reqs []workload.Request, echo bool) ([]Request, error) {
	out := make([]Request, len(reqs))
	orig := make([]string, len(reqs)) // prompts before rewriting
	for i, r := range reqs {
		orig[i] = r.Prompt
		if echo && r.DependsOn >= 0 {
			// A regenerated reply re-sends its dependency's prompt as it
			// was sent; a branch that edits a message extends an earlier
			// request of its dependency chain: echo the nearest one it does.
			echoed := false
			for d := r.DependsOn; d >= 0 && !echoed; d = reqs[d].DependsOn {
				if r.Prompt == orig[d] {
					r.Prompt, echoed = out[d].Prompt, true
				} else if p, ok := echoReply(r.Prompt, orig[d], out[d].Prompt, reqs[d].MaxTokens); ok {
					r.Prompt, echoed = p, true
				}
			}
			if !echoed {
				return nil, fmt.Errorf("request %d extends no request of its dependency chain with its reply; cannot echo replies", r.Seq)
			}
		}
		body, err := json.Marshal(sim.GenerateRequest{Prompt: r.Prompt, MaxTokens: r.MaxTokens})
		if err != nil {
			return nil, fmt.Errorf("encoding request %d: %w", r.Seq, err)
		}
		out[i] = Request{Request: r, Tokens: wordCount(r.Prompt), Body: body}
	}
	return out, nil
}

// echoReply rewrites prompt = depOrig + " " + reply (n words) + rest into
// depNew + OutputText(depNew) + rest.
func echoReply(prompt, depOrig, depNew string, n int) (string, bool) {
	if !strings.HasPrefix(prompt, depOrig+" ") {
		return "", false
	}
	rest := prompt[len(depOrig)+1:]
	// Skip n words of the placeholder reply.
	i := 0
	for k := 0; k < n; k++ {
		j := strings.IndexByte(rest[i:], ' ')
		if j < 0 {
			if k != n-1 {
				return "", false
			}
			i = len(rest)
			break
		}
		i += j + 1
	}
	tail := rest[i:]
	reply := sim.OutputText(sim.Tokenize(depNew), n) // " w1 w2 ..."
	var b strings.Builder
	b.Grow(len(depNew) + len(reply) + 1 + len(tail))
	b.WriteString(depNew)
	b.WriteString(reply)
	if tail != "" {
		b.WriteByte(' ')
		b.WriteString(tail)
	}
	return b.String(), true
}

// wordCount is the token count of workload text (one word = one token).
func wordCount(s string) int {
	if s == "" {
		return 0
	}
	return strings.Count(s, " ") + 1
}

// Shape is a workload's steady-state request shape.
type Shape struct {
	MeanPrompt float64 // tokens
	MeanOutput float64 // tokens
}

// calibrationRequests is about how many requests MeasureShape samples.
const calibrationRequests = 3000

// MeasureShape measures a workload's mean prompt and output lengths on a
// long (600 s) stream, so that multi-turn sessions are not cut short by
// the horizon: the steady-state means.
func MeasureShape(g workload.Generator, seed uint64) Shape {
	const horizon = 600 * time.Second
	reqs := g.Generate(seed, calibrationRequests/horizon.Seconds(), horizon)
	var s Shape
	for _, r := range reqs {
		s.MeanPrompt += float64(wordCount(r.Prompt))
		s.MeanOutput += float64(r.MaxTokens)
	}
	if n := float64(len(reqs)); n > 0 {
		s.MeanPrompt /= n
		s.MeanOutput /= n
	}
	return s
}

// Capacity is the request rate one replica sustains at full utilisation
// when no prefix is ever reused (round robin's worst case), from the
// simulator's step-time model:
//
//	step = DecodeStepBase + uncached prompt tokens / PrefillTokensPerSec + decoding sequences × DecodePerSeq
//
// A saturated engine runs steps back to back with the largest decode batch
// it can hold, B = min(MaxRunning, TokenBudget, KV tokens / (prompt +
// output)); each request then costs
//
//	work = prompt / PrefillTokensPerSec + output × (DecodePerSeq + DecodeStepBase / B)
//
// seconds of engine time, and Capacity = 1 / work.
func Capacity(c sim.Config, s Shape) float64 {
	b := float64(min(c.MaxRunning, c.TokenBudget))
	if kv := float64(c.KVBlocks*c.BlockSize) / max(s.MeanPrompt+s.MeanOutput, 1); kv < b {
		b = max(kv, 1)
	}
	work := s.MeanPrompt/c.PrefillTokensPerSec +
		s.MeanOutput*(c.DecodePerSeq.Seconds()+c.DecodeStepBase.Seconds()/b)
	if !(work > 0) || math.IsInf(work, 0) {
		return 0
	}
	return 1 / work
}
