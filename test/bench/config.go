package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/test/sim"
	"github.com/kvxds/kvxds/test/workload"
	"github.com/kvxds/kvxds/weights"
)

// Mode is a routing mode under test.
type Mode string

// The routing modes. All but UpperBound run live: a fresh simulated fleet,
// a fresh in-process kvxds with a generated policy, and grpc-go xDS clients.
const (
	// RoundRobin is the baseline: load_balancing = "round_robin".
	RoundRobin Mode = "round_robin"
	// LeastRequest is the load-aware baseline: load_balancing =
	// "least_request" (gRPC: power of two choices on outstanding requests).
	LeastRequest Mode = "least_request"
	// KVXDS is consistent hashing on x-session-id (gRPC clients use a ring
	// hash), with the metrics, escape and weights blocks at their
	// documented defaults (DeployedBlocks) unless Config.Bare.
	KVXDS Mode = "kvxds"
	// KVXDSWeights is KVXDS with the metrics, escape and weights blocks
	// tuned for the simulated engine (Escape): kvxds reads its running
	// requests as the queue depth and saturates a replica at a multiple of
	// the mean. Config.Bare does not apply to it.
	KVXDSWeights Mode = "kvxds+weights"
	// KVXDSGroups is KVXDSWeights plus a tenant hash group for the
	// stream's busiest session key (the hot tenant of zipf-tenants):
	// Config.GroupReplicas replicas of its own, exclusive, with weights in
	// Config.GroupWeightLevels levels. It runs only when asked for
	// (OptionalModes).
	KVXDSGroups Mode = "kvxds+groups"
	// KVXDSBounded is KVXDS with bounded load: the hash block's
	// balance_factor = Config.BalanceFactor, which Envoy applies
	// (hash_balance_factor) and proxyless gRPC ignores, so it runs only
	// on the Envoy data plane, and only when asked for (OptionalModes).
	KVXDSBounded Mode = "kvxds+bounded"
	// KVXDSPrefix is KVXDS keyed on the request body's prompt_prefix of
	// Config.PromptPrefix bytes (of a trace replay: of each of
	// Config.PrefixBlocks) instead of x-session-id: a fixed-length key,
	// for clients that send no session id. It runs only when asked for
	// (OptionalModes).
	KVXDSPrefix Mode = "kvxds+prefix"
	// KVXDSConversation is KVXDS keyed on the request body's conversation
	// key (key { conversation = true }): its leading messages, which every
	// turn and branch of a conversation re-sends. It runs only when asked
	// for (OptionalModes).
	KVXDSConversation Mode = "kvxds+conversation"
	// Index is the approximate-index router (IndexRouter, after SGLang's
	// cache_aware policy) in front of the replicas: a per-request router
	// process with its own state, dialling each replica directly on
	// either data plane. It runs only when asked for (OptionalModes).
	Index Mode = "index"
	// IndexLLMD is the second index router, after llm-d's default
	// scheduling profile (LLMDRouter: prefix-cache, queue and
	// KV-utilisation scorers, max-score picker), in the load generator as
	// Index is. It runs only when asked for (OptionalModes).
	IndexLLMD Mode = "index-llmd"
	// KVXDSAdapters is KVXDS (the deployed policy) plus an adapters block
	// (AdaptersBlock): kvxds places each LoRA adapter on replicas of its
	// own, sized to its demand, within Config.MaxLoRA slots per replica.
	// It runs only when asked for (OptionalModes).
	KVXDSAdapters Mode = "kvxds+adapters"
	// IndexLLMDLoRA is IndexLLMD with llm-d's lora-affinity scorer added
	// to the profile (LLMDConfig.LoRAWeight), reading each replica's
	// vllm:lora_requests_info. It runs only when asked for
	// (OptionalModes).
	IndexLLMDLoRA Mode = "index-llmd+lora"
	// KVXDSHashedDecode is, on a prefill/decode fleet (Config.PD), kvxds
	// with the decode pool hashed on the prefill pool's key too, instead
	// of least request. It runs only when asked for (OptionalModes), and
	// only on a P/D fleet.
	KVXDSHashedDecode Mode = "kvxds+hashed-decode"
	// UpperBound is computed offline: the same prompts in arrival order
	// through one prefix cache as large as the whole fleet's.
	UpperBound Mode = "upper-bound"
)

// AllModes lists every mode in report order.
func AllModes() []Mode {
	return []Mode{RoundRobin, LeastRequest, KVXDS, KVXDSWeights, UpperBound}
}

// OptionalModes are the modes that run only when named.
func OptionalModes() []Mode {
	return []Mode{KVXDSGroups, KVXDSBounded, KVXDSPrefix, KVXDSConversation, KVXDSAdapters, Index, IndexLLMD, IndexLLMDLoRA,
		KVXDSHashedDecode}
}

// Live reports whether the mode runs traffic (every mode but UpperBound).
func (m Mode) Live() bool { return m != UpperBound }

// Routed reports whether a router in the load generator picks each
// request's replica (Index, IndexLLMD, IndexLLMDLoRA) instead of the
// data plane.
func (m Mode) Routed() bool { return m == Index || m == IndexLLMD || m == IndexLLMDLoRA }

// Hashed reports whether the mode's pool hashes on a key (the kvxds
// modes), where hot keys apply.
func (m Mode) Hashed() bool {
	switch m {
	case KVXDS, KVXDSWeights, KVXDSGroups, KVXDSBounded, KVXDSPrefix, KVXDSConversation, KVXDSAdapters:
		return true
	}
	return false
}

// Deployable reports whether Config.Bare applies to the mode: the hash
// modes whose policy otherwise carries the documented metrics, escape and
// weights blocks.
func (m Mode) Deployable() bool {
	switch m {
	case KVXDS, KVXDSBounded, KVXDSPrefix, KVXDSConversation, KVXDSAdapters:
		return true
	}
	return false
}

// ParseModes parses a comma-separated list of modes; "all" or "" is
// AllModes.
func ParseModes(s string) ([]Mode, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return AllModes(), nil
	}
	var out []Mode
	for _, f := range strings.Split(s, ",") {
		m := Mode(strings.TrimSpace(f))
		if known := append(AllModes(), OptionalModes()...); !slices.Contains(known, m) {
			return nil, fmt.Errorf("unknown mode %q; known: %s", m, joinModes(known))
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out, nil
}

func joinModes(ms []Mode) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// Config describes a benchmark run: one or more workloads, each replayed
// under each mode. Zero fields take defaults (see Defaults).
type Config struct {
	// Workloads are WorkloadNames() entries; empty means every one of
	// workload.Names() (RollingName, which needs root and a built API
	// server, only when asked for).
	Workloads []string
	// Replicas is the fleet size. Default 8.
	Replicas int
	// Load is the offered load as a fraction of the fleet's capacity
	// without any prefix-cache reuse (see the package documentation).
	// Default 0.7.
	Load float64
	// Duration is the simulated length of the request stream. 0 chooses
	// it per workload: WallPerMode × TimeScale.
	Duration time.Duration
	// WallPerMode is the target wall time of one live mode's arrivals when
	// Duration is 0. Default 16s.
	WallPerMode time.Duration
	// Seed seeds the workload generators. Default 1.
	Seed uint64
	// Modes to run, in this order. Default AllModes.
	Modes []Mode
	// TimeScale is simulated seconds per wall second. 0 chooses it per
	// workload so that the clients receive about MessageBudget streamed
	// tokens per wall second, within [1, MaxTimeScale].
	TimeScale float64
	// MessageBudget is the streamed-token rate, per wall second, the auto
	// time scale aims at: the load generator, the simulated replicas and
	// kvxds share the machine, and each streamed token costs a gRPC
	// message on both sides. Default 40,000.
	MessageBudget float64
	// MaxTimeScale caps the auto time scale. Default 15.
	MaxTimeScale float64
	// KVBlocks is each replica's KV capacity in blocks. 0 takes the
	// workload's default (see the package documentation).
	KVBlocks int
	// PreStart starts the sessions of multi-turn workloads (chat,
	// chat-apps, agent) this long before time zero (their Warmup), so that
	// the stream is in steady state from its first request instead of
	// ramping up over the first session lifetimes. Default 60s (simulated);
	// negative: none.
	PreStart time.Duration
	// WarmupFraction of the requests (the first ones, in arrival order) is
	// replayed but left out of every statistic. Default 0.2; negative:
	// none.
	WarmupFraction float64
	// Clients is the number of grpc-go xDS clients, or of simulated
	// Envoys on the Envoy data plane (each its own xDS node, connections,
	// requests in flight and Lua filter), that share the requests by
	// session (requests without one by Seq). Default 2. The index modes
	// have one router whatever it is.
	Clients int
	// ClientsInTurn sends request k through client k mod Clients, whatever
	// its session: as behind a balancer that spreads requests over the
	// Envoys, not connections, so that no Envoy sees all of a key's
	// requests.
	ClientsInTurn bool
	// Instances is how many kvxds instances serve a live mode: the first
	// decides, the others follow it (ha { follow }), and client i (a
	// grpc-go client or a simulated Envoy, with its access logs) attaches
	// to instance i mod Instances. Default 1.
	Instances int
	// IsolatedInstances keeps each instance's Envoys' requests in flight
	// to itself (controller.Options.NoLoadReports), as kvxds did before
	// instances exchanged them: the ablation.
	IsolatedInstances bool
	// Bare renders the hash modes of Mode.Deployable without the metrics,
	// escape and weights blocks: pure consistent hashing (kvxds still
	// scrapes for its status page, with thresholds no replica reaches).
	// By default they carry the blocks at their documented defaults, as
	// a policy written from the policy reference does (DeployedBlocks).
	Bare bool
	// NoHotKeys turns hot keys off in every kvxds mode (hash { hot_keys {
	// enabled = false } }), and the grpc-go clients send no spread
	// sub-key: the ablation. By default a kvxds mode spreads its hot keys
	// at kvxds's defaults (HotKeysBlock), and the grpc-go clients send
	// each request's spread sub-key, computed from its conversation key.
	NoHotKeys bool
	// HotValues are values of the session header that every kvxds mode
	// declares always hot (hash { hot_keys { declared { } } }): what an
	// operator of a pool without access logs (proxyless gRPC clients)
	// declares. Empty declares none.
	HotValues []string
	// EscapeSet are attributes ("max_kv_occupancy = 1") written into the
	// deployed escape block of every kvxds mode: the ablation of one
	// threshold. Empty keeps the documented defaults.
	EscapeSet []string
	// WeightsSet are attributes ("max = 1") written into the deployed
	// weights block of every kvxds mode, as EscapeSet.
	WeightsSet []string
	// EchoReplies makes a dependent request (the next chat turn, the next
	// agent step) re-send the reply the simulated engine produced for the
	// request it depends on, as a real client does, instead of the
	// workload's placeholder reply text; see PrepareRequests.
	EchoReplies bool
	// SampleEvery is the wall-time period of the queue-depth sampler.
	// Default 100ms.
	SampleEvery time.Duration
	// ScrapeInterval is kvxds's metrics interval (wall time) in
	// KVXDSWeights mode. Default 250ms.
	ScrapeInterval time.Duration
	// AdminAddress is where each live mode's kvxds serves its admin
	// endpoints and status page, one mode after another; default
	// 127.0.0.1:0 (a free port per mode). Progress names the page.
	AdminAddress string
	// Escape configures KVXDSWeights and KVXDSGroups; the zero value
	// takes DefaultEscape.
	Escape Escape
	// GroupReplicas is the size of KVXDSGroups' group. Default 2: the hot
	// tenant of zipf-tenants sends 30% of the requests, 2.4 replicas' worth
	// of 8; an exclusive 3 leaves 70% on the other 5, which tips the
	// replicas of the next-busiest tenants into saturation.
	GroupReplicas int
	// GroupWeightLevels and GroupWeightMin are KVXDSGroups' weights:
	// GroupWeightMin to GroupWeightMin+GroupWeightLevels−1 in
	// GroupWeightLevels levels, at most one move per replica every 10
	// simulated seconds, following each replica's load against the pool's
	// mean (weights { relative = true }) unless GroupHeadroom; one level
	// keeps Escape's weights. Default 2 to 4 in 3 levels, relative: with
	// the hot tenant in its group, what is left of the imbalance is the
	// next tenants' lumps on whichever replicas their keys hash to, and
	// only weights that follow shares of the load, not distance to
	// saturation, move them at a light load; a weight range of 2:1 keeps
	// the group's two members from splitting their tenant 1:4.
	GroupWeightLevels, GroupWeightMin int
	GroupHeadroom                     bool
	// GroupShared makes KVXDSGroups' group not exclusive: its replicas
	// stay in the pool's table too.
	GroupShared bool
	// DataPlanes carry the requests, each workload under every mode once
	// per data plane, in this order. Default grpc-go alone. DataPlane is
	// the one a RunWorkload uses (default grpc-go).
	DataPlanes []DataPlane
	DataPlane  DataPlane
	// MaxLoRA is every simulated replica's LoRA adapter slots (vLLM
	// --max-loras), which its engine reports in vllm:lora_requests_info,
	// and KVXDSAdapters' max_lora. Default 4: multi-lora's hot adapters
	// and a few of its tail fit on a replica, not all 100 (vLLM's own
	// default, 1, would swap on every second request under round robin).
	MaxLoRA int
	// AdapterLoad is the engine time of one adapter swap-in. Zero keeps
	// the simulator's (sim.DefaultConfig).
	AdapterLoad time.Duration
	// BalanceFactor is the hash modes' balance_factor (percent). Zero
	// leaves a body key the policy's default and gives KVXDSBounded and a
	// header key with BalanceOn BoundedFactor.
	BalanceFactor int
	// BalanceOn, if set, is the colocated hash modes' balance_on: what
	// their bound counts ("requests", "prompt_bytes").
	BalanceOn string
	// LoadInterval is the colocated hash modes' load_interval with
	// balance_on = "prompt_bytes" (simulated time): zero keeps the
	// policy's default (fleet.DefaultLoadInterval), negative turns the
	// fleet's load view off ("0s").
	LoadInterval time.Duration
	// PD, if set, runs every workload on a prefill/decode fleet of
	// PD.Prefill replicas of sim.RolePrefill and PD.Decode of
	// sim.RoleDecode instead of Replicas (which it sets to their sum: the
	// load is a fraction of as many colocated replicas' capacity), on the
	// Envoy data plane unless DataPlanes says otherwise; see pd.go. PDKey is the prefill
	// pool's key there: "session" (x-session-id), "conversation", or
	// "prompt_prefix" (PromptPrefix bytes, or of a trace the first of
	// PrefixBlocks); empty picks session where the requests carry one,
	// prompt_prefix for a trace, conversation otherwise.
	PD    PD
	PDKey string
	// PDMinBodyBytes is the kvxds modes' prefill { min_body_bytes }: a
	// request whose body is shorter is prefilled on its decode replica.
	// Default 0, every request on a prefill replica.
	PDMinBodyBytes int
	// PDBalanceFactor is the kvxds modes' prefill pool balance_factor,
	// which bounds each Envoy's requests in flight per prefill replica
	// (0: the policy's default).
	PDBalanceFactor int
	// Trace, if set, is a JSONL trace in Mooncake's format to replay
	// instead of Workloads (see TraceName); PrefixBlocks are the
	// prompt_prefix lengths, in 512-token trace blocks, kvxds runs with.
	// Default 1 and 4.
	Trace        string
	PrefixBlocks []int
	// PromptPrefix is KVXDSPrefix's key length in bytes of the chat
	// body's messages. Default 512: the leading bytes of a short first
	// message, a long one's first ≈90 words.
	PromptPrefix int
	// Rolling configures the rolling workload; zero fields take defaults.
	// Duration and WarmupFraction do not apply to it.
	Rolling Rolling
	// Out is the directory for results.md, results.csv and the charts.
	// Empty writes nothing.
	Out string
	// Progress receives the progress of a mode while it runs: a line
	// rewritten with \r twice a second when ProgressLive (a terminal),
	// else a plain line every ProgressEvery (10 s when zero) and at the
	// end, so that a log keeps one line per report. Nil is silent.
	Progress      io.Writer
	ProgressLive  bool
	ProgressEvery time.Duration
	// Logger receives kvxds's own log (warnings and above are useful: the
	// escape hatch logs its decisions at info). Nil discards it.
	Logger hclog.Logger
}

// Defaults returns c with zero fields filled in.
func (c Config) Defaults() Config {
	if c.Trace != "" {
		c.Workloads = []string{TraceName}
		if len(c.PrefixBlocks) == 0 {
			c.PrefixBlocks = []int{1, 4}
		}
	}
	if len(c.Workloads) == 0 {
		c.Workloads = workload.Names()
	}
	if c.PD.On() {
		c.Replicas = c.PD.Prefill + c.PD.Decode
		if len(c.DataPlanes) == 0 {
			c.DataPlanes = []DataPlane{Envoy}
		}
	}
	if c.Replicas == 0 {
		c.Replicas = 8
	}
	if len(c.DataPlanes) == 0 {
		c.DataPlanes = []DataPlane{GRPCGo}
	}
	if c.DataPlane == "" {
		c.DataPlane = c.DataPlanes[0]
	}
	if c.PromptPrefix == 0 {
		c.PromptPrefix = 512
	}
	if c.MaxLoRA == 0 {
		c.MaxLoRA = 4
	}
	if c.AdapterLoad == 0 {
		c.AdapterLoad = sim.DefaultConfig().AdapterLoad
	}
	if c.GroupReplicas == 0 {
		c.GroupReplicas = 2
	}
	if c.GroupWeightLevels == 0 {
		c.GroupWeightLevels = 3
	}
	if c.GroupWeightMin == 0 {
		c.GroupWeightMin = 2
	}
	if c.Load == 0 {
		c.Load = 0.7
	}
	if c.WallPerMode == 0 {
		c.WallPerMode = 16 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if len(c.Modes) == 0 {
		c.Modes = AllModes()
	}
	if c.MessageBudget == 0 {
		c.MessageBudget = 40000
	}
	if c.MaxTimeScale == 0 {
		c.MaxTimeScale = 15
	}
	if c.PreStart == 0 {
		c.PreStart = 60 * time.Second
	}
	switch {
	case c.WarmupFraction == 0:
		c.WarmupFraction = 0.2
	case c.WarmupFraction < 0:
		c.WarmupFraction = 0
	}
	if c.Instances == 0 {
		c.Instances = 1
	}
	if c.Clients == 0 {
		c.Clients = 2
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = 100 * time.Millisecond
	}
	if c.ScrapeInterval == 0 {
		c.ScrapeInterval = 250 * time.Millisecond
	}
	if c.AdminAddress == "" {
		c.AdminAddress = "127.0.0.1:0"
	}
	if c.Escape == (Escape{}) {
		c.Escape = DefaultEscape()
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Rolling = c.Rolling.defaults()
	return c
}

// Validate reports the first invalid setting of a defaulted Config.
func (c Config) Validate() error {
	for _, b := range c.PrefixBlocks {
		if b < 1 {
			return fmt.Errorf("prefix blocks must be at least 1, not %d", b)
		}
	}
	for _, w := range c.Workloads {
		if w == TraceName && c.Trace != "" {
			continue
		}
		if _, ok := workload.ByName(w); !ok && w != RollingName {
			return fmt.Errorf("unknown workload %q; known: %s", w, strings.Join(WorkloadNames(), ", "))
		}
		if w == RollingName {
			if err := c.Rolling.validate(); err != nil {
				return err
			}
		}
	}
	if c.PDBalanceFactor != 0 && c.PDBalanceFactor < 100 {
		return fmt.Errorf("prefill balance factor must be 0 (the default) or at least 100, not %d", c.PDBalanceFactor)
	}
	if c.PDMinBodyBytes < 0 {
		return fmt.Errorf("prefill min body bytes must not be negative, not %d", c.PDMinBodyBytes)
	}
	if c.PD != (PD{}) && !c.PD.On() {
		return fmt.Errorf("a prefill/decode fleet needs at least one replica of each role, not %s", c.PD)
	}
	switch c.PDKey {
	case "", PDKeySession, PDKeyConversation, PDKeyPromptPrefix:
	default:
		return fmt.Errorf("unknown prefill key %q; known: %s, %s, %s", c.PDKey, PDKeySession, PDKeyConversation, PDKeyPromptPrefix)
	}
	switch {
	case c.Replicas < 1:
		return fmt.Errorf("replicas must be at least 1, not %d", c.Replicas)
	case c.PromptPrefix < policy.MinPromptPrefix:
		// What a policy accepts: a shorter prefix is the same for every
		// chat body.
		return fmt.Errorf("prompt prefix must be at least %d bytes, not %d", policy.MinPromptPrefix, c.PromptPrefix)
	case c.MaxLoRA < 1 || c.MaxLoRA > fleet.MaxAdapterSlots:
		return fmt.Errorf("max LoRA slots must be 1 to %d, not %d", fleet.MaxAdapterSlots, c.MaxLoRA)
	case c.AdapterLoad < 0:
		return fmt.Errorf("adapter load time must not be negative, not %v", c.AdapterLoad)
	case c.BalanceFactor != 0 && c.BalanceFactor <= 100:
		return fmt.Errorf("balance factor must be above 100 (percent of the mean load), not %d", c.BalanceFactor)
	case c.GroupWeightLevels < 1:
		return fmt.Errorf("group weight levels must be at least 1, not %d", c.GroupWeightLevels)
	case c.GroupWeightMin < 1 || c.GroupWeightMin+c.GroupWeightLevels-1 > weights.MaxWeightMultiplier:
		return fmt.Errorf("group weights %d to %d must lie within 1 to %d", c.GroupWeightMin, c.GroupWeightMin+c.GroupWeightLevels-1, weights.MaxWeightMultiplier)
	case !(c.Load > 0):
		return fmt.Errorf("load must be positive, not %v", c.Load)
	case c.Duration < 0:
		return fmt.Errorf("duration must not be negative, not %v", c.Duration)
	case c.TimeScale < 0:
		return fmt.Errorf("time scale must not be negative, not %v", c.TimeScale)
	case c.KVBlocks < 0:
		return fmt.Errorf("kv blocks must not be negative, not %d", c.KVBlocks)
	case c.WarmupFraction < 0 || c.WarmupFraction >= 1:
		return fmt.Errorf("warm-up fraction must be in [0, 1), not %v", c.WarmupFraction)
	case c.Clients < 1:
		return fmt.Errorf("clients must be at least 1, not %d", c.Clients)
	case c.Instances < 1 || c.Instances > c.Clients:
		return fmt.Errorf("instances must be from 1 to the clients (%d), not %d", c.Clients, c.Instances)
	case c.ScrapeInterval < 100*time.Millisecond:
		return errors.New("scrape interval must be at least 100ms (kvxds's minimum)")
	}
	return nil
}

// Profile is what the benchmark sets per workload.
type Profile struct {
	// KVBlocks is each replica's KV capacity: too small for the whole
	// working set of all sessions, large enough for a replica's share of it
	// under affinity plus the KV of its running requests.
	KVBlocks int
	// Why documents the choice.
	Why string
	// WallFactor multiplies Config.WallPerMode for this workload (0 means
	// 1): workloads whose sessions live long need a longer stream for a
	// stable measurement.
	WallFactor float64
}

// Profiles returns the per-workload defaults. The working sets are in
// tokens at Load 0.7 and are the same per replica for any fleet size, as
// the offered rate scales with the fleet.
func Profiles() map[string]Profile {
	return map[string]Profile{
		"chat": {KVBlocks: 4000, Why: "≈155 live conversations of ≈1.3k tokens each on average, no shared system prompt " +
			"(≈210k tokens, ≈13k blocks) across the fleet; a replica holds its ≈1/8 share (≈1.6k blocks) plus " +
			"≈0.8k blocks of running requests, not the whole set",
			// Conversations of up to 20 turns live for minutes, and their
			// long histories carry most prompt tokens; at 1× (an 83 s
			// measured window) round robin's hit rate moved between 0.22
			// and 0.24 over seeds 1–3, and was 0.20 in 312 s runs.
			WallFactor: 2},
		"chat-apps": {KVBlocks: 4000, Why: "≈120 live conversations of ≈1.7k tokens each on average, each starting with " +
			"one of 4 shared 200–500-token system prompts (≈200k tokens, ≈12.5k blocks) across the fleet; a replica " +
			"holds its ≈1/8 share (≈1.6k blocks) plus ≈0.8k blocks of running requests, not the whole set, and " +
			"round robin still hits the system prompts"},
		"agent": {KVBlocks: 4000, Why: "≈20 live traces of 5–25k tokens (≈10k blocks); the largest single prompt " +
			"(≈27k tokens, ≈1.7k blocks) must fit; a replica holds its share of traces plus the 4 schemas"},
		"shared-prefix": {KVBlocks: 2500, Why: "64 groups × 2,048-token prompts = 8,192 blocks; a replica holds " +
			"its ≈8 groups (≈1k blocks) plus the running requests, ≈1/3 of all groups"},
		"few-shot": {KVBlocks: 600, Why: "8 templates × 1–2k tokens ≈ 750 blocks; a replica holds its template(s) " +
			"and running requests, not all 8"},
		"zipf-tenants": {KVBlocks: 1500, Why: "50 tenants × 1,000-token prompts = 3,125 blocks; a replica holds its " +
			"tenants' prompts (the hot replica ≈ 10) and its running requests, not all 50"},
		"chat-stateless": {KVBlocks: 4000, Why: "chat's conversations without a session id: chat's working set", WallFactor: 2},
		"branching": {KVBlocks: 4000, Why: "chat-apps-like trees of ≈7 requests, the branches sharing their history " +
			"up to the branch point; a replica holds its share of live trees, not all of them"},
		"agent-stateless": {KVBlocks: 4000, Why: "agent's traces without a session id: agent's working set"},
		"retrieval": {KVBlocks: 4000, Why: "32 documents of 2–6k tokens (≈8k blocks) under Zipf popularity; a " +
			"replica holds about half of the library, the popular documents and its conversations' turns"},
		"system-prompt": {KVBlocks: 4000, Why: "chat's conversations (≈155 live, ≈210k tokens of their own, ≈13k blocks), " +
			"90% of them behind one 2,000-token system prompt (125 blocks, cached wherever its conversations run); a " +
			"replica holds its ≈1/8 share of the conversations plus the running requests, not the whole set",
			WallFactor: 2},
		"multi-lora": {KVBlocks: 4000, Why: "chat-apps' structure over 100 adapters: ≈140 live conversations of ≈1.5k tokens " +
			"on average (≈200k tokens, ≈12.5k blocks) and 100 adapter system prompts of 100–400 tokens (≈1.6k blocks), " +
			"each adapter's cache its own, across the fleet; a replica holds its ≈1/8 share plus ≈0.8k blocks of " +
			"running requests, not the whole set"},
		"unique-short": {KVBlocks: 3000, Why: "no prefix is ever reused; 48k tokens hold ≈200 running requests " +
			"of ≈220 tokens, so the KV pool does not limit batching"},
	}
}

// simConfig is the replica configuration of a run.
func simConfig(kvBlocks int, timeScale float64) sim.Config {
	c := sim.DefaultConfig()
	c.KVBlocks = kvBlocks
	c.TimeScale = timeScale
	return c
}
