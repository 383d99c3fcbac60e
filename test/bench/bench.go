package bench

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/kvxds/kvxds/test/workload"
)

// workloadPlan is one workload's parameters and request stream, shared by
// every mode.
type workloadPlan struct {
	Name string
	// Shape is the steady-state mean prompt and output length; Capacity
	// the per-replica request rate at full utilisation without reuse
	// (Capacity()); Rate = Load × Replicas × Capacity.
	Shape    Shape
	Capacity float64
	Load     float64
	Rate     float64
	KVBlocks int
	KVWhy    string
	// TimeScale is simulated seconds per wall second; Duration the
	// simulated length of the stream.
	TimeScale float64
	Duration  time.Duration
	// Warmup is the index of the first measured request.
	Warmup   int
	Requests []Request
	Escape   Escape
	// HotSession is the session key with the most requests (ties: the
	// smallest), KVXDSGroups' group.
	HotSession string
	// BodyKey, if set (HCL not empty), keys the kvxds modes on the
	// request body (withBodyKey) instead of x-session-id.
	BodyKey BodyKey
	// MeanPrompt and MeanOutput are the means of this stream; Sessions
	// counts its distinct non-empty Session keys.
	MeanPrompt, MeanOutput float64
	Sessions               int
	// Adapters counts the distinct LoRA adapters the stream's requests
	// name.
	Adapters int
}

// planWorkload generates a workload's request stream and derives its rate, time
// scale and duration from the Config (see the package documentation).
func planWorkload(c Config, name string) (*workloadPlan, error) {
	g, ok := workload.ByName(name)
	if !ok {
		return nil, fmt.Errorf("unknown workload %q", name)
	}
	switch g := g.(type) {
	case *workload.ChatWorkload:
		g.Warmup = max(c.PreStart, 0)
	case *workload.AgentWorkload:
		g.Warmup = max(c.PreStart, 0)
	case *workload.SystemPromptWorkload:
		g.Warmup = max(c.PreStart, 0)
	}
	prof := Profiles()[name]
	kv := c.KVBlocks
	why := prof.Why
	if kv == 0 {
		kv = prof.KVBlocks
	} else {
		why = "set by --kv-blocks"
	}
	if kv == 0 {
		kv = 4000
	}
	shape := MeasureShape(g, c.Seed)
	capacity := Capacity(simConfig(kv, 1), shape)
	if !(capacity > 0) {
		return nil, fmt.Errorf("%s: cannot calibrate the load (capacity %v)", name, capacity)
	}
	rate := c.Load * float64(c.Replicas) * capacity
	scale := c.TimeScale
	if scale == 0 {
		scale = c.MessageBudget / (rate * max(shape.MeanOutput, 1))
		scale = min(max(scale, 1), c.MaxTimeScale)
		scale = math.Round(scale*2) / 2
	}
	dur := c.Duration
	if dur == 0 {
		dur = time.Duration(float64(c.WallPerMode) * scale * cmp.Or(prof.WallFactor, 1)).Round(time.Second)
	}
	reqs, err := PrepareRequests(g.Generate(c.Seed, rate, dur), c.EchoReplies)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%s: no requests at %.2f/s over %v", name, rate, dur)
	}
	p := &workloadPlan{Name: name, Shape: shape, Capacity: capacity, Load: c.Load, Rate: rate,
		KVBlocks: kv, KVWhy: why, TimeScale: scale, Duration: dur, Requests: reqs,
		Warmup: int(c.WarmupFraction * float64(len(reqs))), Escape: c.Escape}
	sessions, adapters := map[string]bool{}, map[string]bool{}
	p.HotSession = hotSession(reqs)
	limit := kv * simConfig(kv, 1).BlockSize
	for _, r := range reqs {
		p.MeanPrompt += float64(r.Tokens)
		p.MeanOutput += float64(r.MaxTokens)
		if r.Session != "" {
			sessions[r.Session] = true
		}
		if r.Adapter != "" {
			adapters[r.Adapter] = true
		}
		if r.Tokens+r.MaxTokens-1 > limit {
			return nil, fmt.Errorf("%s: request %d needs %d tokens of KV but a replica holds %d; raise --kv-blocks",
				name, r.Seq, r.Tokens+r.MaxTokens-1, limit)
		}
	}
	p.MeanPrompt /= float64(len(reqs))
	p.MeanOutput /= float64(len(reqs))
	p.Sessions = len(sessions)
	p.Adapters = len(adapters)
	return p, nil
}

// WorkloadReport is one workload's plan and results.
type WorkloadReport struct {
	Name string
	// DataPlane carried the requests.
	DataPlane DataPlane
	Replicas  int
	Load      float64
	Rate      float64 // requests per simulated second, whole fleet
	Capacity  float64 // per replica, requests per simulated second
	KVBlocks  int
	KVWhy     string
	TimeScale float64
	Duration  time.Duration // simulated
	Requests  int
	Warmup    int
	Sessions  int // distinct non-empty Session keys
	// Adapters counts the distinct LoRA adapters the requests name; MaxLoRA
	// is each replica's adapter slots.
	Adapters, MaxLoRA int
	MeanPrompt        float64
	MeanOutput        float64
	EscapeNote        string
	// GroupNote says how KVXDSGroups ran: its group and its weights.
	GroupNote string
	// AdapterNote says how KVXDSAdapters placed the adapters.
	AdapterNote string
	Modes       []ModeResult
	Targets     []Target
	Charts      []string
	// Rolling holds the rolling workload's results (its Modes are empty);
	// nil for the other workloads.
	Rolling *RollingReport
	// PD is the prefill/decode fleet the workload ran on (Config.PD;
	// zero: colocated replicas), PDKey the prefill pool's key.
	PD    PD
	PDKey string
}

// Report is a whole benchmark run.
type Report struct {
	Config    Config
	Workloads []WorkloadReport
	Wall      time.Duration
}

// label names the workload and, past grpc-go, its data plane: "chat",
// "chat-envoy".
func (w *WorkloadReport) label() string {
	if w.DataPlane == "" || w.DataPlane == GRPCGo {
		return w.Name + pdLabel(w.PD)
	}
	return w.Name + "-" + string(w.DataPlane) + pdLabel(w.PD)
}

// Mode returns the result of mode m, if it ran.
func (w *WorkloadReport) Mode(m Mode) (ModeResult, bool) {
	for _, r := range w.Modes {
		if r.Mode == m {
			return r, true
		}
	}
	return ModeResult{}, false
}

// Run runs every workload of c under every mode, writing the outputs to
// c.Out after each workload. It stops at the first error or when ctx ends.
func Run(ctx context.Context, c Config) (*Report, error) {
	c = c.Defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	// Fail before minutes of other workloads, not after.
	if slices.Contains(c.Workloads, RollingName) {
		if err := RollingUsable(); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	rep := &Report{Config: c}
	for _, name := range c.Workloads {
		for _, dp := range c.DataPlanes {
			if dp != GRPCGo && name == RollingName {
				if c.Progress != nil {
					fmt.Fprintf(c.Progress, "%s: runs on grpc-go only; skipped on %s\n", name, dp)
				}
				continue
			}
			c.DataPlane = dp
			wr, err := RunWorkload(ctx, c, name)
			if err != nil {
				return rep, err
			}
			rep.Workloads = append(rep.Workloads, *wr)
		}
		rep.Wall = time.Since(start)
		if c.Out != "" {
			if err := rep.Write(c.Out); err != nil {
				return rep, err
			}
		}
	}
	rep.Wall = time.Since(start)
	if c.Out != "" {
		if err := rep.Write(c.Out); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// RunWorkload runs one workload under every mode of a defaulted Config.
func RunWorkload(ctx context.Context, c Config, name string) (*WorkloadReport, error) {
	if name == RollingName {
		if c.PD.On() {
			return nil, fmt.Errorf("%s does not run on a prefill/decode fleet", RollingName)
		}
		return runRollingWorkload(ctx, c)
	}
	if c.PD.On() {
		return runPDWorkload(ctx, c, name)
	}
	if name == TraceName && c.Trace != "" {
		return runTraceWorkload(ctx, c)
	}
	p, err := planWorkload(c, name)
	if err != nil {
		return nil, err
	}
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "%s: %d requests (%d sessions) over %v simulated at %.2f req/s (load %.2f of %d × %.2f req/s), "+
			"%d KV blocks per replica, time scale %g (≈%v wall per mode)\n",
			name, len(p.Requests), p.Sessions, p.Duration, p.Rate, p.Load, c.Replicas, p.Capacity, p.KVBlocks,
			p.TimeScale, time.Duration(float64(p.Duration)/p.TimeScale).Round(time.Second))
	}
	wr := &WorkloadReport{Name: name, DataPlane: c.DataPlane, Replicas: c.Replicas, Load: p.Load, Rate: p.Rate, Capacity: p.Capacity,
		KVBlocks: p.KVBlocks, KVWhy: p.KVWhy, TimeScale: p.TimeScale, Duration: p.Duration,
		Requests: len(p.Requests), Warmup: p.Warmup, Sessions: p.Sessions, Adapters: p.Adapters, MaxLoRA: c.MaxLoRA,
		MeanPrompt: p.MeanPrompt, MeanOutput: p.MeanOutput}
	for _, m := range c.Modes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if m == KVXDSBounded && c.DataPlane != Envoy {
			continue // gRPC clients have no bounded load: it is kvxds
		}
		q := p
		switch m {
		case KVXDSPrefix:
			q = withBodyKey(p, PrefixKey(c.PromptPrefix))
		case KVXDSConversation:
			q = withBodyKey(p, ConversationKey())
		case KVXDS, KVXDSWeights, KVXDSGroups, KVXDSBounded, KVXDSAdapters:
			if p.Sessions == 0 {
				if c.Progress != nil {
					fmt.Fprintf(c.Progress, "%s: no request carries a session id; %s skipped\n", name, m)
				}
				continue
			}
		}
		if !m.Live() {
			wr.Modes = append(wr.Modes, UpperBoundResult(p.Requests, p.Warmup, c.Replicas*p.KVBlocks, simConfig(p.KVBlocks, 1).BlockSize, c.Replicas*c.MaxLoRA))
			continue
		}
		if m == KVXDSWeights || m == KVXDSGroups {
			ref, how := referenceDepth(wr, p, c.Replicas)
			p.Escape = c.Escape.Resolve(ref)
			if m == KVXDSGroups {
				p.Escape = p.Escape.WithWeights(c.GroupWeightLevels, c.GroupWeightMin, !c.GroupHeadroom)
				follow := "each replica's headroom"
				if p.Escape.Relative {
					follow = "each replica's load against the mean of the replicas sharing its hash table"
				}
				kind := "an exclusive group"
				if c.GroupShared {
					kind = "a group (not exclusive)"
				}
				wr.GroupNote = fmt.Sprintf("the escape hatch above, and the busiest session key %q in %s of %d replicas; "+
					"weights %d to %d in %d levels following %s, at most one move per replica every %v",
					p.HotSession, kind, c.GroupReplicas, p.Escape.WeightMin, p.Escape.WeightMax, p.Escape.WeightLevels, follow, p.Escape.WeightMinInterval)
			}
			wr.EscapeNote = fmt.Sprintf("escape hatch: saturated at ≥ %d running requests (%.1f× the reference depth %.1f, %s), "+
				"back below %d after %v; KV occupancy ≥ %g; any preemption",
				p.Escape.MaxQueueDepth, p.Escape.QueueFactor, ref, how, p.Escape.ResumeQueueDepth, p.Escape.Hold, p.Escape.MaxKVOccupancy)
		}
		run, err := runLive(ctx, c, q, m, c.DataPlane)
		if err != nil {
			return nil, fmt.Errorf("%s, %s, %s: %w", name, c.DataPlane, m, err)
		}
		res := summarize(m, q, run, c.Replicas)
		if c.Progress != nil && res.Failed > 0 {
			fmt.Fprintf(c.Progress, "%s, %s, %s: %d requests failed: %s\n", name, c.DataPlane, m, res.Failed, failures(run.Results, 3))
		}
		if m == KVXDSPrefix {
			res.Mode = Mode(fmt.Sprintf("kvxds prompt_prefix=%d%s", c.PromptPrefix, bareLabel(c)))
		}
		wr.Modes = append(wr.Modes, res)
		if run.AdapterNote != "" {
			wr.AdapterNote = run.AdapterNote
		}
		if q.BodyKey.HCL != "" && c.Progress != nil {
			fmt.Fprintf(c.Progress, "%s: %d distinct %s keys\n", name, q.Sessions, q.BodyKey.Label)
		}
	}
	wr.Targets = Targets(wr)
	return wr, nil
}

// hotSession returns the session key with the most requests (ties: the
// smallest key), or "" if none has one.
func hotSession(reqs []Request) string {
	n := map[string]int{}
	hot := ""
	for _, r := range reqs {
		if r.Session == "" {
			continue
		}
		n[r.Session]++
		if c := n[r.Session]; hot == "" || c > n[hot] || c == n[hot] && r.Session < hot {
			hot = r.Session
		}
	}
	return hot
}

// referenceDepth is the mean number of requests a replica runs at this
// workload's load: measured under kvxds when that mode ran first, else
// estimated by Little's law from the decode rate alone, each replica
// streaming Rate/N × MeanOutput tokens per second in steps of
// DecodeStepBase + depth × DecodePerSeq.
func referenceDepth(wr *WorkloadReport, p *workloadPlan, replicas int) (float64, string) {
	if m, ok := wr.Mode(KVXDS); ok && len(m.QueueMean) > 0 {
		sum := 0.0
		for _, q := range m.QueueMean {
			sum += q
		}
		return sum / float64(len(m.QueueMean)), "measured under kvxds"
	}
	c := simConfig(p.KVBlocks, 1)
	a := p.Rate / float64(replicas) * p.MeanOutput // tokens per second per replica
	den := 1 - a*c.DecodePerSeq.Seconds()
	if den <= 0.05 {
		den = 0.05
	}
	return a * c.DecodeStepBase.Seconds() / den, "estimated"
}

// Target is one goal of the benchmark and whether this run met it.
type Target struct {
	Workload string
	Goal     string
	Measured string
	Met      bool
}

// deployedTargets checks each keyed kvxds mode that ran (kvxds,
// kvxds+prefix, kvxds+conversation) against the routers users would
// pick instead, where they ran: a hit rate at least 0.97× the better
// index router's (index, index-llmd), an engine TTFT p95 no longer than
// the better one's and at most 0.9× least_request's, and a balance of at
// most 1.3. Engine TTFT: the client's adds the simulated data plane,
// which costs the Envoy modes more than the index routers, dialled
// directly.
func deployedTargets(w *WorkloadReport, add func(goal, measured string, met bool)) {
	var hit, ttft float64
	ttft = math.Inf(1)
	indexed := false
	for _, m := range []Mode{Index, IndexLLMD} {
		if r, ok := w.Mode(m); ok {
			indexed = true
			hit, ttft = max(hit, r.HitRate), min(ttft, r.EngineTTFT.P95)
		}
	}
	lr, okLR := w.Mode(LeastRequest)
	for _, m := range []Mode{KVXDS, KVXDSPrefix, KVXDSConversation} {
		k, ok := w.Mode(m)
		if !ok {
			continue
		}
		if indexed {
			r := k.HitRate / hit
			add(string(m)+" hit rate ≥ 0.97 × the better index router's", fmt.Sprintf("%.3f / %.3f = %.2f×", k.HitRate, hit, r), r >= 0.97)
			t := k.EngineTTFT.P95 / ttft
			add(string(m)+" engine TTFT p95 ≤ the better index router's", fmt.Sprintf("%s / %s = %.2f×", secs(k.EngineTTFT.P95), secs(ttft), t), t <= 1)
		}
		if okLR {
			t := k.EngineTTFT.P95 / lr.EngineTTFT.P95
			add(string(m)+" engine TTFT p95 ≤ 0.9 × least_request's", fmt.Sprintf("%s / %s = %.2f×", secs(k.EngineTTFT.P95), secs(lr.EngineTTFT.P95), t), t <= 0.9)
		}
		if indexed || okLR {
			add(string(m)+" max/mean queue depth ≤ 1.3", fmt.Sprintf("%.2f", k.Balance), k.Balance <= 1.3)
		}
	}
}

// Targets checks the goals that apply to a workload's results: chat
// (hit rate near the upper bound and far above round robin, TTFT p95 far
// below), unique-short (affinity costs nothing), zipf-tenants (the
// escape hatch balances the hot tenant and keeps the hits), and no failed
// request anywhere.
func Targets(w *WorkloadReport) []Target {
	var out []Target
	add := func(goal, measured string, met bool) {
		out = append(out, Target{Workload: w.label(), Goal: goal, Measured: measured, Met: met})
	}
	if w.PD.On() {
		pdTargets(w, add)
		failed := 0
		for _, m := range w.Modes {
			failed += m.Failed
		}
		add("no failed request", fmt.Sprintf("%d failed", failed), failed == 0)
		return out
	}
	rr, okRR := w.Mode(RoundRobin)
	kv, okKV := w.Mode(KVXDS)
	kw, okKW := w.Mode(KVXDSWeights)
	kg, okKG := w.Mode(KVXDSGroups)
	kb, okKB := w.Mode(KVXDSBounded)
	ub, okUB := w.Mode(UpperBound)
	kc, okKC := w.Mode(KVXDSConversation)
	ix, okIX := w.Mode(Index)
	ka, okKA := w.Mode(KVXDSAdapters)
	il, okIL := w.Mode(IndexLLMDLoRA)
	// The conversation key against what a client with a session id gets
	// (chat), and against the approximate-index router (the workloads of
	// clients that send none): hit rate within 5%, TTFT no worse.
	versus := func(name string, o ModeResult) {
		r := kc.HitRate / o.HitRate
		add("kvxds+conversation hit rate ≥ 0.95 × "+name, fmt.Sprintf("%.3f / %.3f = %.2f×", kc.HitRate, o.HitRate, r), r >= 0.95)
		t := kc.ClientTTFT.P95 / o.ClientTTFT.P95
		add("kvxds+conversation client TTFT p95 ≤ "+name+"'s", fmt.Sprintf("%s / %s = %.2f×", secs(kc.ClientTTFT.P95), secs(o.ClientTTFT.P95), t), t <= 1)
	}
	if okKC && okKV && w.Name == "chat" {
		versus("kvxds (x-session-id)", kv)
	}
	if okKC && okIX && (w.Name == "chat-stateless" || w.Name == "branching") {
		versus("index", ix)
	}
	deployedTargets(w, add)
	switch w.Name {
	case RollingName:
		if w.Rolling != nil {
			rollingTargets(w, add)
		}
	case "chat":
		if okKV && okUB {
			r := kv.HitRate / ub.HitRate
			add("kvxds hit rate ≥ 0.9 × upper bound", fmt.Sprintf("%.3f / %.3f = %.2f×", kv.HitRate, ub.HitRate, r), r >= 0.9)
		}
		if okKV && okRR {
			// The prompt tokens each prefilled: what a miss costs. Round
			// robin's hit rate is mostly its requests' reuse within a
			// replica by chance and moves by ±0.01 between runs, so a
			// ratio of hit rates near 4 passed or failed on that noise.
			r := (1 - kv.HitRate) / (1 - rr.HitRate)
			add("kvxds prompt tokens prefilled ≤ 0.25 × round_robin's", fmt.Sprintf("%.3f / %.3f = %.2f× (hit rate %.3f against %.3f)", 1-kv.HitRate, 1-rr.HitRate, r, kv.HitRate, rr.HitRate), r <= 0.25)
			t := kv.ClientTTFT.P95 / rr.ClientTTFT.P95
			add("kvxds client TTFT p95 ≤ 0.25 × round_robin", fmt.Sprintf("%s / %s = %.2f× (engine: %s / %s = %.2f×)",
				secs(kv.ClientTTFT.P95), secs(rr.ClientTTFT.P95), t,
				secs(kv.EngineTTFT.P95), secs(rr.EngineTTFT.P95), kv.EngineTTFT.P95/rr.EngineTTFT.P95), t <= 0.25)
		}
	case "multi-lora":
		// Against the router that scores adapters per request (llm-d's
		// lora-affinity scorer on its default profile), and the bound.
		if okKA && okIL {
			r := ka.SwapIns / il.SwapIns
			floor := ""
			if okUB && !math.IsNaN(ub.SwapIns) {
				reach := "reachable"
				if ub.SwapIns > 0.25*il.SwapIns {
					reach = "no router reaches 0.25×"
				}
				floor = fmt.Sprintf("; floor %.0f = %.2f×: %s", ub.SwapIns, ub.SwapIns/il.SwapIns, reach)
			}
			add("kvxds+adapters swap-ins ≤ 0.25 × index-llmd+lora", fmt.Sprintf("%.0f / %.0f = %.2f× (%.1f / %.1f per 1k requests%s)",
				ka.SwapIns, il.SwapIns, r, ka.SwapInsPer1k, il.SwapInsPer1k, floor), ka.SwapIns <= 0.25*il.SwapIns)
			t := ka.ClientTTFT.P95 / il.ClientTTFT.P95
			add("kvxds+adapters client TTFT p95 ≤ 0.8 × index-llmd+lora", fmt.Sprintf("%s / %s = %.2f×",
				secs(ka.ClientTTFT.P95), secs(il.ClientTTFT.P95), t), t <= 0.8)
		}
		if okKA && okUB {
			r := ka.HitRate / ub.HitRate
			add("kvxds+adapters hit rate ≥ 0.95 × upper bound", fmt.Sprintf("%.3f / %.3f = %.2f×", ka.HitRate, ub.HitRate, r), r >= 0.95)
		}
		if okKA {
			add("kvxds+adapters max/mean queue depth ≤ 1.3", fmt.Sprintf("%.2f (kvxds: %s)", ka.Balance, ratioOr(kv.Balance, okKV)), ka.Balance <= 1.3)
		}
	case "unique-short":
		if okKV && okRR {
			t := kv.ClientTTFT.P95 / rr.ClientTTFT.P95
			add("kvxds client TTFT p95 ≤ 1.1 × round_robin", fmt.Sprintf("%s / %s = %.2f×", secs(kv.ClientTTFT.P95), secs(rr.ClientTTFT.P95), t), t <= 1.1)
		}
	case "zipf-tenants":
		if okKW {
			add("kvxds+weights max/mean queue depth ≤ 1.5", fmt.Sprintf("%.2f (kvxds: %s)", kw.Balance, ratioOr(kv.Balance, okKV)), kw.Balance <= 1.5)
		}
		if okKW && okKV {
			r := kw.HitRate / kv.HitRate
			add("kvxds+weights hit rate ≥ 0.85 × kvxds", fmt.Sprintf("%.3f / %.3f = %.2f×", kw.HitRate, kv.HitRate, r), r >= 0.85)
		}
		if okKG {
			add("kvxds+groups max/mean queue depth ≤ 1.25", fmt.Sprintf("%.2f", kg.Balance), kg.Balance <= 1.25)
		}
		if okKG && okKV {
			r := kg.HitRate / kv.HitRate
			add("kvxds+groups hit rate ≥ 0.95 × kvxds", fmt.Sprintf("%.3f / %.3f = %.2f×", kg.HitRate, kv.HitRate, r), r >= 0.95)
		}
		if okKB {
			add("kvxds+bounded max/mean queue depth ≤ 1.25", fmt.Sprintf("%.2f (kvxds: %s)", kb.Balance, ratioOr(kv.Balance, okKV)), kb.Balance <= 1.25)
		}
		if okKB && okKV {
			r := kb.HitRate / kv.HitRate
			add("kvxds+bounded hit rate ≥ 0.95 × kvxds", fmt.Sprintf("%.3f / %.3f = %.2f×", kb.HitRate, kv.HitRate, r), r >= 0.95)
		}
		if okKG && okRR {
			t := kg.ClientTTFT.P95 / rr.ClientTTFT.P95
			add("kvxds+groups client TTFT p95 ≤ 0.5 × round_robin", fmt.Sprintf("%s / %s = %.2f×", secs(kg.ClientTTFT.P95), secs(rr.ClientTTFT.P95), t), t <= 0.5)
		}
	}
	failed := 0
	for _, m := range w.Modes {
		failed += m.Failed
	}
	if w.Rolling != nil {
		for _, x := range w.Rolling.Results {
			failed += x.Failed
		}
	}
	add("no failed request", fmt.Sprintf("%d failed", failed), failed == 0)
	return out
}

func ratioOr(v float64, ok bool) string {
	if !ok {
		return "not run"
	}
	return fmt.Sprintf("%.2f", v)
}

// secs formats simulated seconds compactly.
func secs(s float64) string {
	switch {
	case math.IsNaN(s):
		return "–"
	case s < 1:
		return fmt.Sprintf("%.0fms", s*1000)
	default:
		return fmt.Sprintf("%.2fs", s)
	}
}

// failures lists up to n distinct kinds of error of the failed results,
// each with its count; errors naming a cluster the data plane did not
// know are one kind, whichever cluster they name.
func failures(res []reqResult, n int) string {
	count := map[string]int{}
	var order []string
	for _, r := range res {
		if r.Err == nil {
			continue
		}
		e := r.Err.Error()
		for _, kind := range []string{"unknown cluster selected for RPC", "no cluster "} {
			if i := strings.Index(e, kind); i >= 0 {
				e = e[:i+len(kind)] + "…"
			}
		}
		if count[e] == 0 {
			order = append(order, e)
		}
		count[e]++
	}
	var out []string
	for _, e := range order[:min(n, len(order))] {
		out = append(out, fmt.Sprintf("%d× %s", count[e], e))
	}
	if len(order) > n {
		out = append(out, fmt.Sprintf("and %d more kinds", len(order)-n))
	}
	return strings.Join(out, "; ")
}
