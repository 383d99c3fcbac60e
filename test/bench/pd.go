package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/sim"
)

// Prefill/decode (P/D) disaggregation in the benchmark (Config.PD). Each
// workload runs on a fleet of PD.Prefill replicas of sim.RolePrefill and
// PD.Decode of sim.RoleDecode, with the configuration the colocated
// replicas have otherwise. The load generator sends each request to a
// decode replica, naming a prefill replica in sim.PrefillerHeader; the
// decode replica (as llm-d's routing sidecar does) prefills it there with
// max_tokens 1, receives the prompt's KV and decodes. The load is the
// same offered rate as on P+D colocated replicas at Config.Load
// (Config.Replicas becomes P+D): the fleet's capacity without reuse,
// counted as if every replica both prefilled and decoded.
//
// On the grpc-go data plane a proxyless gRPC client orchestrates P/D
// itself, as vLLM's proxy does, on two xDS targets: it prefills on
// xds:///bench-prefill (PrefillPoolName) with max_tokens 1, carrying the
// key in x-session-id (body keys computed ahead, withBodyKey), reads from
// the answer's sim.ReplicaAddrHeader where the KV is, and decodes on
// xds:///bench naming that replica in sim.KVFromHeader; the decode
// replica pulls the KV without calling it (sendGRPC). The pools are the
// same as below; what Envoy does, grpc-go's own balancers do (the
// prefill pool's ring hash in the kvxds modes), and the index mode dials
// the replicas directly. The prefill block's min_body_bytes is the
// Envoy filter's: the gRPC client prefills every request remotely.
//
// The modes, on the Envoy data plane all over HTTP to the replicas'
// OpenAI API:
//
//   - round_robin and least_request: the simulated Envoy balances the
//     decode pool so (its load_balancing), and the load generator names
//     the prefill replicas in turn (there is no key table to pick one).
//   - kvxds: the policy a user writes from the policy reference: the
//     decode pool balances by least request with a prefill block naming
//     the prefill pool, which hashes on the workload's key (PDKey);
//     metrics, escape and weights at their documented defaults on both
//     (unless Config.Bare). The
//     simulated Envoy runs the decode listener's Lua filters (the prefill
//     pool's body keys, then kvxds.prefill with the table from its route
//     metadata) and sends the request on with the header they set.
//   - kvxds+hashed-decode: the same with the decode pool hashed on the
//     same key (ring hash, hot keys at their defaults).
//   - index: after SGLang's PD router (sgl-model-gateway, the
//     prefill_policy and decode_policy of its PD mode): cache_aware
//     (IndexRouter) over the prefill replicas, power of two choices by
//     requests in flight over the decode replicas; the load generator
//     sends straight to the decode replica.
//   - upper-bound: the best prefill hit rate: the prompts in arrival order
//     through one cache of all prefill replicas' blocks, prompts only (a
//     prefill replica never computes the reply; PrefillUpperBound).

// PD is a prefill/decode fleet: Prefill replicas that prefill and Decode
// replicas that decode.
type PD struct {
	Prefill, Decode int
}

// On reports whether p describes a P/D fleet.
func (p PD) On() bool { return p.Prefill > 0 && p.Decode > 0 }

func (p PD) String() string { return fmt.Sprintf("%d:%d", p.Prefill, p.Decode) }

// ParsePD parses "P:D".
func ParsePD(s string) (PD, error) {
	a, b, ok := strings.Cut(s, ":")
	p, err1 := strconv.Atoi(strings.TrimSpace(a))
	d, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || p < 1 || d < 1 {
		return PD{}, fmt.Errorf("%q is not P:D, the prefill and decode replicas (as in 4:4)", s)
	}
	return PD{Prefill: p, Decode: d}, nil
}

// The prefill pool's keys (Config.PDKey).
const (
	PDKeySession      = "session"
	PDKeyConversation = "conversation"
	PDKeyPromptPrefix = "prompt_prefix"
)

// PrefillPoolName is the prefill pool of a P/D policy; the decode pool is
// PoolName, whose listener the simulated Envoys route through.
const PrefillPoolName = PoolName + "-prefill"

// pdKey returns the plan keyed for the P/D modes (body keys as sessions,
// as withBodyKey does), the prefill pool's key block body and its label.
func pdKey(c Config, p *workloadPlan) (*workloadPlan, string, string, error) {
	kind := c.PDKey
	if kind == "" {
		switch {
		case p.Sessions > 0:
			kind = PDKeySession
		case p.Name == TraceName:
			kind = PDKeyPromptPrefix
		default:
			kind = PDKeyConversation
		}
	}
	switch kind {
	case PDKeySession:
		if p.Sessions == 0 {
			return nil, "", "", fmt.Errorf("%s: no request carries a session id to key the prefill pool on", p.Name)
		}
		return p, fmt.Sprintf("header = %q", SessionHeader), SessionHeader, nil
	case PDKeyConversation:
		k := ConversationKey()
		return withBodyKey(p, k), k.HCL, k.Label, nil
	default:
		n := c.PromptPrefix
		if p.Name == TraceName && len(c.PrefixBlocks) > 0 {
			n = PrefixBytes(c.PrefixBlocks[0])
		}
		k := PrefixKey(n)
		return withBodyKey(p, k), k.HCL, k.Label, nil
	}
}

// PDPolicyOptions are the inputs of a P/D policy.
type PDPolicyOptions struct {
	Mode Mode
	// Prefill and Decode are the replicas' addresses (ip:port); prefill
	// replica i gets hash_key "prefill-i", decode replica i "decode-i".
	Prefill, Decode []string
	// Key is the prefill pool's key block body ("header = ...",
	// "prompt_prefix = 512").
	Key string
	// MinBodyBytes is the prefill block's min_body_bytes (0: left out,
	// its default).
	MinBodyBytes int
	// BalanceFactor is the prefill pool's hash balance_factor (0: left
	// out, the policy's default: 250 for prompt_prefix and conversation
	// keys, policy.DefaultPrefillBalanceFactor for a header).
	BalanceFactor int
	// BalanceOn is the prefill pool's balance_on ("": left out, prompt
	// bytes where the factor is the policy's, else requests for a header
	// key).
	BalanceOn string
	TimeScale float64
	Scrape    time.Duration // wall
	// Bare leaves the metrics, escape and weights blocks out of the kvxds
	// modes' pools; NoHotKeys turns a hashed decode pool's hot keys off.
	Bare, NoHotKeys bool
}

// PDPolicy renders the HCL policy of a P/D mode: the decode pool
// (PoolName) and the prefill pool (PrefillPoolName).
func PDPolicy(o PDPolicyOptions) (string, error) {
	kvxds := o.Mode == KVXDS || o.Mode == KVXDSHashedDecode
	bounded := strings.HasPrefix(o.Key, "prompt_prefix") || strings.HasPrefix(o.Key, "conversation")
	var b strings.Builder
	fmt.Fprintf(&b, "pool %q {\n  port = 10000\n", PoolName)
	switch o.Mode {
	case RoundRobin, Index:
		// The index router sends around kvxds: the pools only feed the
		// samplers.
		b.WriteString("  load_balancing = \"round_robin\"\n")
	case LeastRequest, KVXDS:
		b.WriteString("  load_balancing = \"least_request\"\n")
	case KVXDSHashedDecode:
		fmt.Fprintf(&b, "  load_balancing = \"hash\"\n  hash {\n    algorithm     = \"ring_hash\"\n    min_ring_size = %d\n    key { %s }\n%s  }\n",
			RingSize, o.Key, HotKeysBlock(o.TimeScale, o.NoHotKeys, nil))
	default:
		return "", fmt.Errorf("mode %q does not run on a prefill/decode fleet", o.Mode)
	}
	if kvxds {
		fmt.Fprintf(&b, "  prefill {\n    pool = %q\n", PrefillPoolName)
		if o.MinBodyBytes > 0 {
			fmt.Fprintf(&b, "    min_body_bytes = %d\n", o.MinBodyBytes)
		}
		b.WriteString("  }\n")
	}
	pdEndpoints(&b, "decode", o.Decode)
	pdBlocks(&b, o, kvxds, o.Mode == KVXDSHashedDecode && bounded)
	b.WriteString("}\n\n")

	fmt.Fprintf(&b, "pool %q {\n  port = 10001\n", PrefillPoolName)
	if kvxds {
		// The prefill table is the pool's own: no ring to size, and no
		// listener traffic for hot keys to learn from.
		bf := ""
		if o.BalanceFactor > 0 {
			bf = fmt.Sprintf("    balance_factor = %d\n", o.BalanceFactor)
		}
		if o.BalanceOn != "" {
			bf += fmt.Sprintf("    balance_on = %q\n", o.BalanceOn)
		}
		on := o.BalanceOn
		if on == "" && (bounded || o.BalanceFactor == 0) {
			on = fleet.BalanceOnPromptBytes // the policy's default for these keys, and a prefill pool's
		}
		if on == fleet.BalanceOnPromptBytes && o.TimeScale > 0 {
			// The default interval in simulated time, as a colocated
			// pool's: left to the policy, it would be wall time, and the
			// filters would learn the prefill replicas' load TimeScale
			// times less often than in a deployment.
			bf += fmt.Sprintf("    load_interval = %q\n", wallDuration(fleet.DefaultLoadInterval, o.TimeScale))
		}
		fmt.Fprintf(&b, "  hash {\n    key { %s }\n%s  }\n", o.Key, bf)
	} else {
		b.WriteString("  load_balancing = \"round_robin\"\n")
	}
	pdEndpoints(&b, "prefill", o.Prefill)
	// The prefill pool is bounded by default whatever its key (a header
	// key loosely: policy.DefaultPrefillBalanceFactor, which keeps an
	// unbounded pool's weights), unless it is told to count requests
	// without a factor.
	pdBlocks(&b, o, kvxds, kvxds && (bounded || o.BalanceFactor > 0 || o.BalanceOn != fleet.BalanceOnRequests))
	b.WriteString("}\n")
	return b.String(), nil
}

func pdEndpoints(b *strings.Builder, role string, addrs []string) {
	b.WriteString("  static {\n")
	for i, e := range addrs {
		fmt.Fprintf(b, "    endpoint %q { hash_key = \"%s-%d\" }\n", e, role, i)
	}
	b.WriteString("  }\n")
}

// pdBlocks writes a pool's metrics, escape and weights blocks: the
// documented defaults in the kvxds modes (DeployedBlocksSet), else blocks
// that scrape for the status page only, as Policy writes them.
func pdBlocks(b *strings.Builder, o PDPolicyOptions, kvxds, bounded bool) {
	if kvxds {
		if !o.Bare {
			b.WriteString(DeployedBlocksSet(o.TimeScale, bounded, nil, nil))
		}
		return
	}
	every := max(o.Scrape, time.Second)
	fmt.Fprintf(b, "  metrics {\n    engine      = \"vllm\"\n    interval    = %q\n    timeout     = %q\n    stale_after = %q\n  }\n"+
		"  escape {\n    max_queue_depth        = 1000000000\n    max_kv_occupancy       = 1\n    max_preemption_rate    = 1000000000\n    max_saturated_fraction = 0\n  }\n"+
		"  weights {\n    min = 1\n    max = 1\n  }\n", every.String(), (every * 4 / 5).String(), (8 * every).String())
}

// runPDWorkload runs one workload (or c.Trace) on the P/D fleet c.PD under
// every mode of c that applies.
func runPDWorkload(ctx context.Context, c Config, name string) (*WorkloadReport, error) {
	var p *workloadPlan
	var err error
	if name == TraceName && c.Trace != "" {
		p, err = planTrace(c)
	} else {
		p, err = planWorkload(c, name)
	}
	if err != nil {
		return nil, err
	}
	q, keyHCL, keyLabel, err := pdKey(c, p)
	if err != nil {
		return nil, err
	}
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "%s: %d requests over %v simulated at %.2f req/s (load %.2f of %d × %.2f req/s) on %d prefill and %d decode replicas, "+
			"prefill key %s (%d distinct), %d KV blocks per replica, time scale %g\n",
			name, len(p.Requests), p.Duration.Round(time.Second), p.Rate, p.Load, c.Replicas, p.Capacity, c.PD.Prefill, c.PD.Decode,
			keyLabel, q.Sessions, p.KVBlocks, p.TimeScale)
	}
	wr := &WorkloadReport{Name: p.Name, DataPlane: c.DataPlane, Replicas: c.Replicas, Load: p.Load, Rate: p.Rate, Capacity: p.Capacity,
		KVBlocks: p.KVBlocks, KVWhy: p.KVWhy, TimeScale: p.TimeScale, Duration: p.Duration,
		Requests: len(p.Requests), Warmup: p.Warmup, Sessions: q.Sessions, MeanPrompt: p.MeanPrompt, MeanOutput: p.MeanOutput,
		PD: c.PD, PDKey: keyLabel, MaxLoRA: c.MaxLoRA}
	for _, m := range c.Modes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		switch m {
		case UpperBound:
			wr.Modes = append(wr.Modes, PrefillUpperBound(p.Requests, p.Warmup, c.PD.Prefill, p.KVBlocks, simConfig(p.KVBlocks, 1)))
		case RoundRobin, LeastRequest, KVXDS, KVXDSHashedDecode, Index:
			run, err := runPD(ctx, c, q, m, keyHCL)
			if err != nil {
				return nil, fmt.Errorf("%s, P/D %s, %s: %w", name, c.PD, m, err)
			}
			res := summarizePD(m, q, run, c.PD)
			if c.Progress != nil && res.Failed > 0 {
				fmt.Fprintf(c.Progress, "%s, P/D %s, %s: %d requests failed: %s\n", name, c.PD, m, res.Failed, failures(run.Results, 3))
			}
			wr.Modes = append(wr.Modes, res)
		default:
			if c.Progress != nil {
				fmt.Fprintf(c.Progress, "%s: %s does not run on a prefill/decode fleet; skipped\n", name, m)
			}
		}
	}
	wr.Targets = Targets(wr)
	return wr, nil
}

// runPD runs one live mode on a fresh P/D fleet and a fresh kvxds,
// through c.DataPlane.
func runPD(ctx context.Context, c Config, w *workloadPlan, mode Mode, keyHCL string) (*liveRun, error) {
	grpcDP := c.DataPlane == GRPCGo
	if grpcDP {
		// gRPC has no body keys: the client sends the key withBodyKey
		// computed ahead in x-session-id, as in the colocated runs.
		keyHCL = fmt.Sprintf("header = %q", SessionHeader)
	}
	scfg := simConfig(w.KVBlocks, w.TimeScale)
	scfg.MaxLoRA, scfg.AdapterLoad = c.MaxLoRA, c.AdapterLoad
	var reps []*sim.Replica
	defer func() {
		for _, r := range reps {
			r.Close()
		}
	}()
	start := func(role sim.Role, n int) ([]string, error) {
		var addrs []string
		for i := range n {
			rc := scfg
			rc.Role, rc.ID = role, fmt.Sprintf("%s-%d", role, i)
			r, err := sim.Start(rc, "127.0.0.1:0")
			if err != nil {
				return nil, fmt.Errorf("starting the simulated fleet: %w", err)
			}
			reps = append(reps, r)
			addr := r.Addr()
			if grpcDP {
				// gRPC's own server transport, as runLive gives gRPC
				// clients. A prefill replica still names its main
				// address in sim.ReplicaAddrHeader, which the decode
				// replica only reports back.
				if addr, err = r.ListenGRPC("127.0.0.1:0"); err != nil {
					return nil, err
				}
			}
			addrs = append(addrs, addr)
		}
		return addrs, nil
	}
	prefill, err := start(sim.RolePrefill, c.PD.Prefill)
	if err != nil {
		return nil, err
	}
	decode, err := start(sim.RoleDecode, c.PD.Decode)
	if err != nil {
		return nil, err
	}
	pol, err := PDPolicy(PDPolicyOptions{Mode: mode, Prefill: prefill, Decode: decode, Key: keyHCL,
		MinBodyBytes: c.PDMinBodyBytes, BalanceFactor: c.PDBalanceFactor, BalanceOn: c.BalanceOn, TimeScale: w.TimeScale, Scrape: c.ScrapeInterval, Bare: c.Bare, NoHotKeys: c.NoHotKeys})
	if err != nil {
		return nil, err
	}
	k, err := startKVXDS(ctx, c, pol, w.Name, mode)
	if err != nil {
		return nil, err
	}
	defer k.stop()
	run := &liveRun{Policy: pol, Results: make([]reqResult, len(w.Requests))}
	g := &dispatcher{cfg: c, plan: w, mode: mode, reps: reps, http: k.http, ctrl: k.ctrl, run: run}
	pr := &pdRouter{mode: mode, prefill: prefill, decode: decode, bodyKeyed: w.BodyKey.HCL != "", inTurn: c.ClientsInTurn}
	if mode == Index {
		pr.index = NewIndexRouter(len(prefill), DefaultIndexConfig())
		pr.p2c = newP2CRouter(len(decode), c.Seed)
	}
	switch {
	case grpcDP && mode == Index:
		if pr.pre, err = k.dialDirect(ctx, prefill); err != nil {
			return nil, err
		}
		if pr.dec, err = k.dialDirect(ctx, decode); err != nil {
			return nil, err
		}
	case grpcDP:
		if pr.pre, err = k.connect(ctx, c, w.Name, mode, PrefillPoolName, len(prefill)); err != nil {
			return nil, err
		}
		if pr.dec, err = k.connect(ctx, c, w.Name, mode, PoolName, len(decode)); err != nil {
			return nil, err
		}
		if (mode == KVXDS || mode == KVXDSHashedDecode) && !c.NoHotKeys {
			// The hashed pools spread their hot keys by the
			// conversation key (the default spread_by): a gRPC client
			// sends the sub-key itself.
			g.plan = withSpreads(w, ConversationKey())
		}
	case mode == Index:
		pr.hc = &http.Client{Transport: envoyTransport()}
		defer pr.hc.CloseIdleConnections()
		warm := &envoyClient{hc: pr.hc}
		if err := warm.warm(ctx, decode); err != nil {
			return nil, err
		}
	default:
		if pr.envoys, err = k.connectEnvoys(ctx, c, w.Name, mode, decode); err != nil {
			return nil, err
		}
	}
	g.pd = pr
	if err := g.dispatch(ctx); err != nil {
		return nil, err
	}
	return run, nil
}

// pdRouter sends a P/D mode's requests. On the Envoy data plane: through
// the simulated Envoys to the decode pool, naming the prefill replica
// itself in round_robin and least_request, or straight to the replicas
// the index routers pick. On grpc-go: as a client that runs both steps
// itself (sendGRPC).
type pdRouter struct {
	mode            Mode
	prefill, decode []string
	envoys          []*envoyClient
	bodyKeyed       bool
	inTurn          bool          // Config.ClientsInTurn
	next            atomic.Uint64 // the next prefill replica in turn
	index           *IndexRouter  // prefill, index
	p2c             *p2cRouter    // decode, index
	hc              *http.Client  // index, Envoy data plane
	// pre and dec, on grpc-go, are the clients' channels to the prefill
	// and decode pools (client i's at i), or under index one per
	// replica.
	pre, dec []testgrpc.TestServiceClient
}

func (p *pdRouter) send(ctx context.Context, r *Request, start time.Time) reqResult {
	if p.pre != nil {
		return p.sendGRPC(ctx, r, start)
	}
	switch p.mode {
	case Index:
		pi, di := p.index.Pick(r.Prompt), p.p2c.Pick()
		res := reqResult{Sent: time.Since(start), First: -1, EngineTTFT: nan()}
		// SGLang's router counts a prefill in flight until the prefill
		// server answers, which it does with the first token.
		var once sync.Once
		prefilled := func() { once.Do(func() { p.index.Done(pi) }) }
		streamCompletion(ctx, p.hc, p.decode[di], [][2]string{{sim.PrefillerHeader, p.prefill[pi]}}, r, start, &res, nil, prefilled)
		prefilled()
		p.p2c.Done(di)
		return res
	case RoundRobin, LeastRequest:
		pick := p.prefill[(p.next.Add(1)-1)%uint64(len(p.prefill))]
		return p.envoys[clientIndex(r, len(p.envoys), p.inTurn)].send(ctx, r, start, p.bodyKeyed, [2]string{sim.PrefillerHeader, pick})
	default:
		return p.envoys[clientIndex(r, len(p.envoys), p.inTurn)].send(ctx, r, start, p.bodyKeyed)
	}
}

// sendGRPC runs r as a proxyless gRPC client that orchestrates P/D
// itself (vLLM's proxy pattern): a prefill call with max_tokens 1 on the
// prefill pool, carrying the key, then the decode call on the decode pool
// naming in sim.KVFromHeader the address the prefill answer gave
// (sim.ReplicaAddrHeader), from which the decode replica pulls the KV
// without calling it. The decode call carries the key only under
// kvxds+hashed-decode. res.Sent is the prefill call's start, so client
// TTFT runs to the decode call's first token and pays both calls.
func (p *pdRouter) sendGRPC(ctx context.Context, r *Request, start time.Time) reqResult {
	res := reqResult{Sent: time.Since(start), First: -1, EngineTTFT: nan()}
	pi := -1
	var pre, dec testgrpc.TestServiceClient
	if p.mode == Index {
		var di int
		pi, di = p.index.Pick(r.Prompt), p.p2c.Pick()
		defer p.p2c.Done(di)
		pre, dec = p.pre[pi], p.dec[di]
	} else {
		i := clientIndex(r, len(p.pre), p.inTurn)
		pre, dec = p.pre[i], p.dec[i]
	}
	body, err := json.Marshal(sim.GenerateRequest{Prompt: r.Prompt, MaxTokens: 1})
	if err != nil {
		res.Err, res.Done = err, time.Since(start)
		return res
	}
	pf := reqResult{Sent: res.Sent, First: -1, EngineTTFT: nan()}
	hdr, _ := streamGRPC(ctx, pre, requestMD(r, true), body, 1, start, &pf)
	if pi >= 0 {
		// The prefill call ends with its one token: SGLang's router
		// counts the prefill in flight until then.
		p.index.Done(pi)
	}
	if pf.Err != nil {
		res.Err, res.Done = fmt.Errorf("prefill: %w", pf.Err), pf.Done
		return res
	}
	from := mdLast(hdr, sim.ReplicaAddrHeader)
	if from == "" {
		res.Err, res.Done = fmt.Errorf("prefill replica %q named no %s", pf.Replica, sim.ReplicaAddrHeader), pf.Done
		return res
	}
	md := append(requestMD(r, p.mode == KVXDSHashedDecode), sim.KVFromHeader, from)
	_, tr := streamGRPC(ctx, dec, md, r.Body, r.MaxTokens, start, &res)
	// The replicas' TTFT: the prefill replica's own (its queue and
	// prefill, to its one token) plus the decode replica's (the KV pull,
	// the engine's wait and step: a pulled request reaches it with no
	// prior time), the parts a decode replica's TTFT sums when its
	// sidecar prefills. Left out, as harness: the end of the prefill call
	// after its token and the decode call's round trip until the decode
	// replica takes the request.
	res.EngineTTFT = pf.EngineTTFT + res.EngineTTFT
	if res.Err != nil {
		return res
	}
	// A decode replica that pulled reports the address it pulled from,
	// with no prompt or cached tokens of the prefill's (it made no
	// prefill call): the prefill replica's account is the prefill
	// call's, the transfer the decode replica's.
	if got := mdLast(tr, sim.MDPrefillReplica); got != from {
		res.Err = fmt.Errorf("decode replica %q pulled the KV from %q, not %q", res.Replica, got, from)
		return res
	}
	res.PD = &pdAccount{Replica: pf.Replica, Prompt: pf.PromptTokens, Cached: pf.CachedTokens,
		Transferred: mdInt(tr, sim.MDTransferred), TTFT: pf.EngineTTFT}
	return res
}

// p2cRouter is power of two choices over requests in flight, as SGLang's
// power_of_two policy picks: two distinct replicas at random, the less
// loaded one (the first drawn on a tie).
type p2cRouter struct {
	mu   sync.Mutex
	rng  *rand.Rand
	load []int
}

func newP2CRouter(n int, seed uint64) *p2cRouter {
	return &p2cRouter{rng: rand.New(rand.NewPCG(seed, 2)), load: make([]int, n)}
}

// Pick chooses a replica and counts it in flight; Done ends it.
func (x *p2cRouter) Pick() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := len(x.load)
	a := x.rng.IntN(n)
	pick := a
	if n > 1 {
		b := x.rng.IntN(n - 1)
		if b >= a {
			b++
		}
		if x.load[b] < x.load[a] {
			pick = b
		}
	}
	x.load[pick]++
	return pick
}

// Done ends a request Pick sent to replica i.
func (x *p2cRouter) Done(i int) {
	x.mu.Lock()
	x.load[i]--
	x.mu.Unlock()
}

// PDResult is what a P/D mode adds to its ModeResult. Client-side
// figures cover the measured requests that succeeded.
type PDResult struct {
	// PrefillHitRate is Σ prefill cached / Σ prefill prompt tokens from
	// the decode replicas' headers (sim.HeaderPrefillCached, …), or on
	// grpc-go from the prefill calls' trailers (sim.MDCachedTokens, …);
	// a request prefilled on its decode replica counts that replica's.
	PrefillHitRate float64
	// TPOT is time per output token, (done − first token) / (tokens − 1)
	// per request of at least two tokens, at the client.
	TPOT Quantiles
	// ReplicaTTFT is the TTFT the decode replicas report per request
	// (sim.HeaderTTFT: the prefill replica's, the transfer, the decode
	// engine's wait and step; on grpc-go the prefill call's TTFT plus
	// the decode call's, the same parts): what routing decides, without
	// the harness's share of the client's TTFT.
	ReplicaTTFT Quantiles
	// PrefillTTFT is the prefill replicas' own part of it (their queue
	// and prefill: sim.HeaderPrefillTTFT, or on grpc-go the prefill
	// call's TTFT), over the requests prefilled remotely: the side a
	// prefill router decides. The rest is the transfer and the decode
	// replica's wait and step.
	PrefillTTFT Quantiles
	// PrefillBalance and DecodeBalance are Balance over each role's
	// replicas: the busiest one's mean queue depth over the role's mean.
	PrefillBalance, DecodeBalance float64
	// Remote, LocalNoHeader and LocalFailed are the decode replicas'
	// sim:pd_remote_prefills_total and sim:pd_local_prefills_total by
	// reason over the measured part.
	Remote, LocalNoHeader, LocalFailed float64
	// Transferred is the prompt tokens whose KV moved (from the decode
	// replicas' headers or trailers), TransferredPerRequest their mean.
	Transferred, TransferredPerRequest float64
	// PrefillSessionsMoved counts sessions (the plan's keys) whose
	// remote prefills ran on more than one prefill replica, of
	// PrefillSessions with at least two.
	PrefillSessionsMoved, PrefillSessions int
}

// summarizePD is summarize for a P/D mode, with its PDResult.
func summarizePD(mode Mode, w *workloadPlan, run *liveRun, pd PD) ModeResult {
	m := summarize(mode, w, run, pd.Prefill+pd.Decode)
	r := &PDResult{}
	d := run.After.Sub(run.Before)
	r.Remote, r.LocalNoHeader, r.LocalFailed = d.PDRemote, d.PDLocalNoHeader, d.PDLocalFailed
	var tpot, ttft, pttft []float64
	var prompt, cached float64
	n := 0
	on := map[string]map[string]bool{}
	count := map[string]int{}
	for i, res := range run.Results {
		if res.Err != nil {
			continue
		}
		s := sessionOf(&w.Requests[i])
		if pdr := res.PD; pdr != nil && pdr.Replica != "" && s != "" {
			if on[s] == nil {
				on[s] = map[string]bool{}
			}
			on[s][pdr.Replica] = true
			count[s]++
		}
		if i < w.Warmup {
			continue
		}
		n++
		switch pdr := res.PD; {
		case pdr != nil && pdr.Replica != "":
			prompt += float64(pdr.Prompt)
			cached += float64(pdr.Cached)
			r.Transferred += float64(pdr.Transferred)
			if !math.IsNaN(pdr.TTFT) {
				pttft = append(pttft, pdr.TTFT)
			}
		default:
			prompt += float64(res.PromptTokens)
			cached += float64(res.CachedTokens)
		}
		if !math.IsNaN(res.EngineTTFT) {
			ttft = append(ttft, res.EngineTTFT)
		}
		if res.Tokens >= 2 && res.First >= 0 {
			tpot = append(tpot, (res.Done-res.First).Seconds()*w.TimeScale/float64(res.Tokens-1))
		}
	}
	if prompt > 0 {
		r.PrefillHitRate = cached / prompt
	}
	if n > 0 {
		r.TransferredPerRequest = r.Transferred / float64(n)
	}
	r.TPOT, r.ReplicaTTFT, r.PrefillTTFT = quantiles(tpot), quantiles(ttft), quantiles(pttft)
	for s, k := range count {
		if k >= 2 {
			r.PrefillSessions++
			if len(on[s]) > 1 {
				r.PrefillSessionsMoved++
			}
		}
	}
	r.PrefillBalance = balanceOf(m.QueueMean[:min(pd.Prefill, len(m.QueueMean))])
	r.DecodeBalance = balanceOf(m.QueueMean[min(pd.Prefill, len(m.QueueMean)):])
	m.PD = r
	return m
}

// balanceOf is the busiest of means over their mean (NaN when all are 0).
func balanceOf(means []float64) float64 {
	sum, hi := 0.0, 0.0
	for _, q := range means {
		sum += q
		hi = max(hi, q)
	}
	if !(sum > 0) {
		return math.NaN()
	}
	return hi / (sum / float64(len(means)))
}

// PrefillUpperBound is the best prefill hit rate any router could reach
// on the prefill replicas: the prompts in arrival order through one
// sim.Cache of all replicas prefill replicas' blocks (blocks each, of
// cfg's block size), each looked up as the engine does (never its last
// token) and then inserted, prompt only: a prefill replica computes no
// reply, so a conversation's next turn can hit its previous prompt, not
// the reply in between. Only requests from warm on are counted. Its
// prefill TTFT is an ideal router's (IdealPrefillTTFT).
func PrefillUpperBound(reqs []Request, warm, replicas, blocks int, cfg sim.Config) ModeResult {
	blockSize := cfg.BlockSize
	hits, queries := replayHits(reqs, warm, replicas*blocks, blockSize, false)
	m := UpperBoundResult(nil, 0, 1, blockSize, 0)
	m.Requests, m.Measured, m.HitTokens, m.QueryToks = len(reqs), len(reqs)-warm, hits, queries
	if queries > 0 {
		m.HitRate = hits / queries
		m.ClientHitRate = m.HitRate
	}
	m.PD = &PDResult{PrefillHitRate: m.HitRate, TPOT: Quantiles{nan(), nan(), nan()}, ReplicaTTFT: Quantiles{nan(), nan(), nan()},
		PrefillTTFT: IdealPrefillTTFT(reqs, warm, replicas, blocks, cfg), PrefillBalance: nan(), DecodeBalance: nan(),
		Remote: nan(), LocalNoHeader: nan(), LocalFailed: nan(), Transferred: nan(), TransferredPerRequest: nan()}
	return m
}

// pdTargets checks the goals of a P/D workload: each kvxds mode's client
// TTFT p95 at most half round robin's and no worse than the index
// router's, and its TPOT p95 no worse than round robin's.
func pdTargets(w *WorkloadReport, add func(goal, measured string, met bool)) {
	rr, okRR := w.Mode(RoundRobin)
	ix, okIX := w.Mode(Index)
	ub, okUB := w.Mode(UpperBound)
	for _, mode := range []Mode{KVXDS, KVXDSHashedDecode} {
		kv, ok := w.Mode(mode)
		if !ok || kv.PD == nil {
			continue
		}
		if okRR && rr.PD != nil {
			t := kv.ClientTTFT.P95 / rr.ClientTTFT.P95
			ideal := ""
			if okUB && ub.PD != nil && !math.IsNaN(ub.PD.PrefillTTFT.P95) {
				// What routing alone can reach, beside the goal.
				r := ub.PD.PrefillTTFT.P95 / rr.ClientTTFT.P95
				reach := "reachable"
				if r > 0.5 {
					reach = "no router reaches 0.5×"
				}
				ideal = fmt.Sprintf("; an ideal router's prefill alone %s = %.2f×: %s", secs(ub.PD.PrefillTTFT.P95), r, reach)
			}
			add(string(mode)+" client TTFT p95 ≤ 0.5 × round_robin", fmt.Sprintf("%s / %s = %.2f× (replicas: %s%s)",
				secs(kv.ClientTTFT.P95), secs(rr.ClientTTFT.P95), t, replicaRatio(kv, rr), ideal), t <= 0.5)
			p := kv.PD.TPOT.P95 / rr.PD.TPOT.P95
			// Decode steps barely differ between modes: three digits, so
			// that a miss by a fraction of a percent reads as one.
			add(string(mode)+" TPOT p95 ≤ round_robin's", fmt.Sprintf("%.2fms / %.2fms = %.3f×",
				1000*kv.PD.TPOT.P95, 1000*rr.PD.TPOT.P95, p), p <= 1)
		}
		if okIX && ix.PD != nil {
			t := kv.ClientTTFT.P95 / ix.ClientTTFT.P95
			add(string(mode)+" client TTFT p95 ≤ index", fmt.Sprintf("%s / %s = %.2f× (replicas: %s; prefill: %s / %s = %.2f×)",
				secs(kv.ClientTTFT.P95), secs(ix.ClientTTFT.P95), t, replicaRatio(kv, ix),
				secs(kv.PD.PrefillTTFT.P95), secs(ix.PD.PrefillTTFT.P95), kv.PD.PrefillTTFT.P95/ix.PD.PrefillTTFT.P95), t <= 1)
		}
	}
}

// replicaRatio compares two P/D modes' replica-reported TTFT p95.
func replicaRatio(a, b ModeResult) string {
	return fmt.Sprintf("%s / %s = %.2f×", secs(a.PD.ReplicaTTFT.P95), secs(b.PD.ReplicaTTFT.P95), a.PD.ReplicaTTFT.P95/b.PD.ReplicaTTFT.P95)
}

// msecs formats a short simulated time in milliseconds, to a tenth.
func msecs(s float64) string {
	if math.IsNaN(s) {
		return "–"
	}
	return strconv.FormatFloat(s*1000, 'f', 1, 64) + "ms"
}

// pdLabel names a P/D fleet in a workload's label (and its charts' file
// names): "-pd4x4".
func pdLabel(p PD) string {
	if !p.On() {
		return ""
	}
	return fmt.Sprintf("-pd%dx%d", p.Prefill, p.Decode)
}
