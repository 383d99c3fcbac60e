package workload

import (
	"math/rand/v2"
	"strings"
	"time"
)

// AgentWorkload is tool-using agent loops (ReAct / function calling): each
// step re-sends the whole trace so far, so step k's prompt extends step
// k−1's by the model's action and the tool's observation. Prompts grow to
// tens of thousands of tokens while outputs stay short, so prefill dominates
// and a cache miss is expensive.
//
// Step k's prompt is
//
//	schema ␣ task ␣ action₀ ␣ observation₀ ␣ … ␣ action_{k−1} ␣ observation_{k−1}
//
// where schema (system prompt + tool definitions) is shared by all traces of
// the same agent type, action_j is MaxTokens_j pseudo-words defined by the
// workload (the replica's real output is ignored) and observation_j is the
// tool's result. Step k depends on step k−1 and its At is step k−1's At plus
// an exponential tool time (a lower bound: the load generator also waits
// for step k−1 to complete).
//
// Session = trace id ("agent-N"); Tenant = agent type ("agent-type-N").
//
// Traces start as a Poisson process at rate / Steps.Expected(), so the
// long-run request rate is rate. Lengths are in tokens (words). Defaults are
// the kvxds benchmark's model of coding/browsing agents: a long tool schema,
// observations of a file excerpt or a page snippet, and terse tool calls.
type AgentWorkload struct {
	// AgentTypes is the number of distinct agents (schemas); a trace picks
	// one uniformly. Default 4.
	AgentTypes int
	// SchemaLen is the length of each agent type's system prompt plus tool
	// schema. Default 1500.
	SchemaLen int
	// TaskLen is the length of the user's task that opens a trace. Default
	// log-normal, median 150, σ 0.6, clamped to 20–1000.
	TaskLen LogNormal
	// Steps is the number of model calls (= requests) per trace. Default
	// uniform 5–30 (mean 17.5).
	Steps UniformInt
	// ObservationLen is the length of each tool result appended after an
	// action. Default uniform 100–800.
	ObservationLen UniformInt
	// OutputLen is each step's MaxTokens: a tool call or a short thought.
	// Default uniform 50–150.
	OutputLen UniformInt
	// StepGap is the mean of the exponential time between a step's arrival
	// and the next step's earliest send time (tool execution). Default 1s.
	StepGap time.Duration
	// Stateless drops Session: the agent framework sends no session id
	// (AgentStateless). Conversation, System and Lead are set either way.
	Stateless bool
	// Warmup starts traces at −Warmup instead of 0, keeping only requests
	// with At >= 0 (steady state from the first request). A request whose
	// previous step arrived before 0 has DependsOn −1 but still carries the
	// full trace. Default 0.
	Warmup time.Duration
}

// Agent returns the agent-loop workload with its defaults.
func Agent() *AgentWorkload {
	return &AgentWorkload{
		AgentTypes:     4,
		SchemaLen:      1500,
		TaskLen:        LogNormal{Median: 150, Sigma: 0.6, Min: 20, Max: 1000},
		Steps:          UniformInt{Min: 5, Max: 30},
		ObservationLen: UniformInt{Min: 100, Max: 800},
		OutputLen:      UniformInt{Min: 50, Max: 150},
		StepGap:        time.Second,
	}
}

// AgentStateless returns agent loops with no session id, named
// "agent-stateless": Agent's traces, step for step and byte for byte,
// without Session.
func AgentStateless() *AgentWorkload {
	a := Agent()
	a.Stateless = true
	return a
}

// Name is "agent", or "agent-stateless" for [AgentStateless].
func (a *AgentWorkload) Name() string {
	if a.Stateless {
		return "agent-stateless"
	}
	return "agent"
}

type agentStep struct {
	at          time.Duration
	output, obs int // obs: the observation that follows this step's action
}

// Generate implements [Generator].
func (a *AgentWorkload) Generate(seed uint64, rate float64, duration time.Duration) []Request {
	if !validArgs(rate, duration) {
		return nil
	}
	const name = "agent"
	types := max(a.AgentTypes, 1)
	schemaLen := max(a.SchemaLen, 1)
	schemas := sharedTexts(seed, name, types, func(*rand.Rand) int { return schemaLen })
	typeIDs := make([]string, types)
	for i := range typeIDs {
		typeIDs[i] = id("agent-type-", i)
	}

	var reqs []Request
	var steps []agentStep
	arrivals := rngFor(seed, name, tagArrivals, 0)
	poisson(arrivals, rate/max(a.Steps.Expected(), 1), -max(a.Warmup, 0), duration, func(i int, start time.Duration) {
		r := rngFor(seed, name, tagSession, uint64(i))
		typ := r.IntN(types)
		n := max(a.Steps.Sample(r), 1)
		task := a.TaskLen.Sample(r)
		steps = steps[:0]
		at := start
		for k := 0; k < n; k++ {
			if k > 0 {
				at += expDuration(r, a.StepGap)
			}
			if at >= duration {
				break
			}
			steps = append(steps, agentStep{at: at, output: max(a.OutputLen.Sample(r), 1), obs: max(a.ObservationLen.Sample(r), 1)})
		}
		size := len(schemas[typ]) + 5*task
		for _, s := range steps[:len(steps)-1] {
			size += 5 * (s.output + s.obs)
		}

		text := rngFor(seed, name, tagText, uint64(i))
		session := id("agent-", i)
		var b strings.Builder
		b.Grow(size)
		b.WriteString(schemas[typ])
		b.WriteByte(' ')
		writeWords(&b, text, task)
		lead := b.Len()
		ends := make([]int, len(steps))
		for k := range steps {
			if k > 0 {
				prev := steps[k-1]
				b.WriteByte(' ')
				writeWords(&b, text, prev.output) // the action step k−1 "produced"
				b.WriteByte(' ')
				writeWords(&b, text, prev.obs)
			}
			ends[k] = b.Len()
		}
		full := b.String()
		first := len(reqs)
		key := session
		if a.Stateless {
			key = ""
		}
		for k, s := range steps {
			dep := -1
			if k > 0 {
				dep = first + k - 1
			}
			reqs = append(reqs, Request{At: s.at, Session: key, Tenant: typeIDs[typ],
				Prompt: full[:ends[k]], MaxTokens: s.output, DependsOn: dep,
				Conversation: session, System: len(schemas[typ]), Lead: lead})
		}
	})
	return finalize(reqs, duration)
}
