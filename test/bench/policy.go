package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/weights"
)

// PoolName is the pool every generated policy defines; clients dial
// xds:///PoolName.
const PoolName = "bench"

// SessionHeader is the hash key: workload.Request.Session.
const SessionHeader = "x-session-id"

// RingSize is the ring hash's minimum_ring_size: grpc-go's cap of 4,096
// entries, 512 per replica at 8 replicas, keeps each replica's share of
// the key space within a few percent of 1/N (the default 1,024 leaves it
// ±10%: the busiest replica takes ≈20% more than its share of unique keys).
const RingSize = 4096

// Escape holds the escape-hatch and weight settings of KVXDSWeights, in
// simulated time where they are durations (the policy gets them divided by
// the time scale, since kvxds runs on the wall clock).
//
// kvxds reads the simulated replicas as a custom engine whose queue depth
// is vllm:num_requests_running: at the loads benchmarked, an engine's
// batch never fills (MaxRunning 256, chunked prefill) and requests hardly
// ever wait, so vllm:num_requests_waiting stays 0 even on a replica that
// serves two or three times its share; the running requests are what
// piles up there. KV occupancy and preemptions keep their vLLM meaning.
type Escape struct {
	// MaxQueueDepth saturates a replica running this many requests, and
	// ResumeQueueDepth lets it back in once below for Hold. Zero: derived
	// from QueueFactor and ResumeFactor × the reference depth (Resolve).
	MaxQueueDepth    int
	ResumeQueueDepth int
	// QueueFactor and ResumeFactor scale the reference depth: the mean
	// number of requests a replica runs at this load. MinQueueDepth is a
	// floor for the derived MaxQueueDepth: an engine running a handful of
	// requests is not saturated, and moving its sessions costs their
	// caches.
	QueueFactor, ResumeFactor float64
	MinQueueDepth             int
	// MaxKVOccupancy saturates a replica whose running requests hold this
	// fraction of its KV blocks (cached, unreferenced blocks count as free,
	// as in vLLM's kv_cache_usage_perc); ResumeKVOccupancy lets it back.
	MaxKVOccupancy, ResumeKVOccupancy float64
	// MaxPreemptionRate (per wall second) saturates a replica that preempts
	// faster.
	MaxPreemptionRate float64
	// Hold is how long (simulated) a saturated replica must stay calm.
	Hold time.Duration
	// MaxSaturatedFraction of the pool may be out at once.
	MaxSaturatedFraction float64
	// Weight multipliers follow free capacity between WeightMin and
	// WeightMax in WeightLevels levels, at most once per
	// WeightMinInterval (simulated).
	WeightMin, WeightMax, WeightLevels int
	Smoothing, Hysteresis              float64
	WeightMinInterval                  time.Duration
	// Relative makes the weights follow each replica's load against the
	// pool's mean instead of its own headroom.
	Relative bool
}

// DefaultEscape returns the KVXDSWeights settings for the simulated
// engine; see the package documentation for the reasoning.
func DefaultEscape() Escape {
	return Escape{
		QueueFactor:          3,
		ResumeFactor:         1,
		MinQueueDepth:        8,
		MaxKVOccupancy:       0.9,
		ResumeKVOccupancy:    0.8,
		MaxPreemptionRate:    0,
		Hold:                 10 * time.Second,
		MaxSaturatedFraction: 0.75,
		WeightMin:            1,
		WeightMax:            2,
		WeightLevels:         2,
		Smoothing:            0.3,
		Hysteresis:           0.5,
		WeightMinInterval:    30 * time.Second,
	}
}

// WithWeights returns e with weights min to min+levels−1 in levels
// steps, at most one move per replica every 10 (simulated) seconds, and
// relative (or not) to the pool's load; levels 1 returns e.
func (e Escape) WithWeights(levels, min int, relative bool) Escape {
	if levels <= 1 {
		return e
	}
	e.WeightMin, e.WeightMax, e.WeightLevels = max(min, 1), max(min, 1)+levels-1, levels
	e.WeightMinInterval = 10 * time.Second
	e.Relative = relative
	return e
}

// Resolve fills MaxQueueDepth and ResumeQueueDepth, if zero, from the
// reference depth ref (requests running per replica at this load).
func (e Escape) Resolve(ref float64) Escape {
	if e.MaxQueueDepth == 0 {
		e.MaxQueueDepth = max(int(math.Ceil(e.QueueFactor*ref)), e.MinQueueDepth, 2)
	}
	if e.ResumeQueueDepth == 0 {
		e.ResumeQueueDepth = max(int(math.Ceil(e.ResumeFactor*ref)), 1)
	}
	if e.ResumeQueueDepth >= e.MaxQueueDepth {
		e.ResumeQueueDepth = max(e.MaxQueueDepth-1, 1)
	}
	return e
}

// BoundedFactor is the balance_factor of kvxds+bounded, and of a header
// key asked to count something (BalanceOn), unless given: Envoy's own
// default hash_balance_factor.
const BoundedFactor = 150

// PolicyOptions are the inputs of one generated policy.
type PolicyOptions struct {
	Mode      Mode
	Endpoints []string // ip:port; endpoint i gets hash_key "replica-i"
	// Kubernetes, if set, discovers the endpoints from a Service's
	// EndpointSlices instead (the rolling workload).
	Kubernetes *KubernetesSource
	TimeScale  float64
	Scrape     time.Duration // wall
	Escape     Escape
	// GroupKey and GroupReplicas are KVXDSGroups' group: the session key
	// it takes, on GroupReplicas replicas of its own.
	GroupKey      string
	GroupReplicas int
	// GroupShared leaves the group's replicas in the pool's table too
	// (exclusive = false).
	GroupShared bool
	// BalanceFactor is the hash modes' balance_factor (Config.BalanceFactor).
	BalanceFactor int
	// BalanceOn, if set, is the hash modes' balance_on (Config.BalanceOn).
	BalanceOn string
	// LoadInterval is Config.LoadInterval.
	LoadInterval time.Duration
	// BodyKey, if set, is the key block's body that keys the hash modes
	// on the request body instead of x-session-id ("prompt_prefix = 512",
	// "conversation = true"; Envoy only, and balance_factor then defaults
	// to 150).
	BodyKey string
	// Bare leaves the metrics, escape and weights blocks out of the modes
	// of Mode.Deployable (Config.Bare).
	Bare bool
	// NoHotKeys turns the hash modes' hot keys off (Config.NoHotKeys).
	NoHotKeys bool
	// HotValues are values of SessionHeader declared always hot in the
	// hash modes (Config.HotValues).
	HotValues []string
	// EscapeSet and WeightsSet are attributes written into the deployed
	// escape and weights blocks (Config.EscapeSet, Config.WeightsSet).
	EscapeSet, WeightsSet []string
	// MaxLoRA is KVXDSAdapters' max_lora (Config.MaxLoRA).
	MaxLoRA int
}

// bounded is whether the hash block has a balance_factor, written or a
// body key's default: the escape block's sustain then defaults to
// weights.DefaultBoundedSustain.
func (o *PolicyOptions) bounded() bool {
	switch o.Mode {
	case KVXDSBounded:
		return true
	case KVXDS, KVXDSWeights, KVXDSGroups, KVXDSPrefix, KVXDSConversation, KVXDSAdapters:
		return o.BodyKey != ""
	}
	return false
}

// KubernetesSource is a policy's kubernetes block: the pool's replicas
// are the endpoints of Service in Namespace, at the EndpointSlice port
// named (or numbered) Port, read through Kubeconfig.
type KubernetesSource struct {
	Namespace, Service, Port, Kubeconfig string
}

// wallDuration formats a simulated duration as the wall duration kvxds
// must use.
func wallDuration(d time.Duration, scale float64) string {
	w := time.Duration(float64(d) / scale).Round(time.Millisecond)
	return w.String()
}

// Policy renders the HCL policy of a live mode. xDS and admin addresses
// come from the controller options, so the policy has none.
func Policy(o PolicyOptions) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "pool %q {\n  port = 10000\n", PoolName)
	switch o.Mode {
	case RoundRobin, Index, IndexLLMD, IndexLLMDLoRA:
		// The index routers route around kvxds: the pool only feeds the
		// samplers.
		b.WriteString("  load_balancing = \"round_robin\"\n")
	case LeastRequest:
		b.WriteString("  load_balancing = \"least_request\"\n")
	case KVXDS, KVXDSWeights, KVXDSGroups, KVXDSBounded, KVXDSPrefix, KVXDSConversation, KVXDSAdapters:
		key := fmt.Sprintf("header = %q", SessionHeader)
		if o.BodyKey != "" {
			key = o.BodyKey
		}
		fmt.Fprintf(&b, "  load_balancing = \"hash\"\n  hash {\n    algorithm     = \"ring_hash\"\n    min_ring_size = %d\n    key { %s }\n",
			RingSize, key)
		switch {
		case o.Mode == KVXDSBounded:
			fmt.Fprintf(&b, "    balance_factor = %d\n", cmp.Or(o.BalanceFactor, BoundedFactor))
		case o.BodyKey != "" && o.BalanceFactor != 0 && o.BalanceFactor != policy.DefaultPromptPrefixBalanceFactor:
			// A body key's bounded load away from the default it gets.
			fmt.Fprintf(&b, "    balance_factor = %d\n", o.BalanceFactor)
		case o.BodyKey == "" && o.BalanceOn != "":
			// A header key has no bound by default: naming what it
			// counts asks for one.
			fmt.Fprintf(&b, "    balance_factor = %d\n", cmp.Or(o.BalanceFactor, BoundedFactor))
		}
		if o.BalanceOn != "" {
			fmt.Fprintf(&b, "    balance_on = %q\n", o.BalanceOn)
		}
		on := o.BalanceOn
		if on == "" && (strings.HasPrefix(o.BodyKey, "prompt_prefix") || strings.HasPrefix(o.BodyKey, "conversation") || o.Mode == KVXDSAdapters) {
			// The policy's default for these keys, and for a pool
			// serving adapters.
			on = fleet.BalanceOnPromptBytes
		}
		if on == fleet.BalanceOnPromptBytes {
			// The default interval is simulated time, like the others.
			iv := "0s"
			if o.LoadInterval >= 0 {
				iv = wallDuration(cmp.Or(o.LoadInterval, fleet.DefaultLoadInterval), o.TimeScale)
			}
			fmt.Fprintf(&b, "    load_interval = %q\n", iv)
		}
		if len(o.HotValues) > 0 && o.BodyKey != "" {
			return "", fmt.Errorf("hot values are values of %s, which a body-keyed pool does not key on", SessionHeader)
		}
		b.WriteString(HotKeysBlock(o.TimeScale, o.NoHotKeys, o.HotValues))
		b.WriteString("  }\n")
	default:
		return "", fmt.Errorf("mode %q has no policy", o.Mode)
	}
	if k := o.Kubernetes; k != nil {
		fmt.Fprintf(&b, "  kubernetes {\n    namespace  = %q\n    service    = %q\n    port       = %q\n    kubeconfig = %q\n  }\n",
			k.Namespace, k.Service, k.Port, k.Kubeconfig)
	} else {
		b.WriteString("  static {\n")
		for i, e := range o.Endpoints {
			fmt.Fprintf(&b, "    endpoint %q { hash_key = \"replica-%d\" }\n", e, i)
		}
		b.WriteString("  }\n")
	}
	escape := o.Mode == KVXDSWeights || o.Mode == KVXDSGroups
	switch {
	case o.Mode.Deployable() && !o.Bare:
		b.WriteString(DeployedBlocksSet(o.TimeScale, o.bounded(), o.EscapeSet, o.WeightsSet))
	case !escape && o.Kubernetes == nil:
		// Scraped for the status page only: no replica can reach a
		// threshold and the weights stay 1, so every mode routes as it
		// would without metrics. At least a second apart: a page read by
		// people, not the escape hatch.
		every := max(o.Scrape, time.Second)
		timeout := every * 4 / 5
		fmt.Fprintf(&b, `  metrics {
    engine      = "vllm"
    interval    = %q
    timeout     = %q
    stale_after = %q
  }
  escape {
    max_queue_depth        = 1000000000
    max_kv_occupancy       = 1
    max_preemption_rate    = 1000000000
    max_saturated_fraction = 0
  }
  weights {
    min = 1
    max = 1
  }
`, every.String(), timeout.String(), (8 * every).String())
	}
	if escape {
		e := o.Escape
		timeout := max(o.Scrape*4/5, 50*time.Millisecond)
		fmt.Fprintf(&b, `  metrics {
    engine      = "custom"
    interval    = %q
    timeout     = %q
    stale_after = %q
    signal "queue_depth"  { metric = "vllm:num_requests_running" }
    signal "kv_occupancy" { metric = "vllm:kv_cache_usage_perc" }
    signal "preemptions"  { metric = "vllm:num_preemptions_total" }
    # For the status page; the decisions follow the three above.
    signal "prefix_queries" { metric = "vllm:prefix_cache_queries_total" }
    signal "prefix_hits"    { metric = "vllm:prefix_cache_hits_total" }
    signal "ttft"           { metric = "vllm:time_to_first_token_seconds" }
  }
  escape {
    max_queue_depth        = %d
    resume_queue_depth     = %d
    max_kv_occupancy       = %g
    resume_kv_occupancy    = %g
    max_preemption_rate    = %g
    hold                   = %q
    max_saturated_fraction = %g
  }
  weights {
    min          = %d
    max          = %d
    levels       = %d
    smoothing    = %g
    hysteresis   = %g
    min_interval = %q
    relative     = %t
  }
`, o.Scrape.String(), timeout.String(), (8 * o.Scrape).String(),
			e.MaxQueueDepth, e.ResumeQueueDepth, e.MaxKVOccupancy, e.ResumeKVOccupancy, e.MaxPreemptionRate,
			wallDuration(e.Hold, o.TimeScale), e.MaxSaturatedFraction,
			e.WeightMin, e.WeightMax, e.WeightLevels, e.Smoothing, e.Hysteresis,
			wallDuration(e.WeightMinInterval, o.TimeScale), e.Relative)
	}
	if o.Mode == KVXDSGroups {
		if o.GroupKey == "" || o.GroupReplicas < 1 {
			return "", fmt.Errorf("mode %q needs a group key and at least one group replica", o.Mode)
		}
		// The group matches on the session header itself, whose value is
		// the tenant in zipf-tenants; inside the group that key is left
		// out, so the tenant's requests spread over its replicas.
		fmt.Fprintf(&b, "  group \"hot\" {\n    match {\n      header = %q\n      values = [%q]\n    }\n    replicas  = %d\n    exclusive = %t\n  }\n",
			SessionHeader, o.GroupKey, o.GroupReplicas, !o.GroupShared)
	}
	if o.Mode == KVXDSAdapters {
		b.WriteString(AdaptersBlock(o.TimeScale, o.MaxLoRA))
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// The documented defaults (docs/reference/policy.md) of the settings
// DeployedBlocks writes, in the engine's time.
const (
	docMetricsInterval = 2 * time.Second
	docMetricsTimeout  = time.Second
	docStaleAfter      = 5 // × interval
	docEscapeHold      = 30 * time.Second
	docEscapeSustain   = weights.DefaultSustain
	// docEscapeBoundedSustain is sustain's default where the hash block
	// has a balance_factor.
	docEscapeBoundedSustain = weights.DefaultBoundedSustain
	docWeightsInterval      = 30 * time.Second
	// minMetricsInterval is the shortest interval kvxds accepts.
	minMetricsInterval = 100 * time.Millisecond
)

// DeployedBlocks is the metrics, escape and weights blocks of a pool as a
// policy written from the policy reference has them: engine = "vllm" (the
// simulator exports vLLM V1's names, so the queue is
// vllm:num_requests_waiting), and every threshold, level and factor at
// its default, left out. Only the durations are written: the documented
// defaults (2 s interval, 1 s timeout, stale after 5 intervals, 30 s hold
// and min_interval, the escape block's sustain) are engine time, so they
// are divided by the time scale into the wall time kvxds runs on (the
// interval no shorter than kvxds's 100 ms, the timeout then half of it).
// Each of escapeSet ("max_kv_occupancy = 1") is written into the escape
// block as it is: an ablation of one threshold.
func DeployedBlocks(timeScale float64, escapeSet ...string) string {
	return DeployedBlocksSet(timeScale, false, escapeSet, nil)
}

// DeployedBlocksSet is DeployedBlocks of a pool whose hash block has a
// balance_factor if bounded (whose sustain then defaults to
// weights.DefaultBoundedSustain, also engine time), with weightsSet
// ("max = 1") written into the weights block too. A duration either set
// names is written as the set has it (wall time), not from its default.
func DeployedBlocksSet(timeScale float64, bounded bool, escapeSet, weightsSet []string) string {
	if !(timeScale > 0) {
		timeScale = 1
	}
	wall := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) / timeScale).Round(time.Millisecond)
	}
	interval, timeout := wall(docMetricsInterval), wall(docMetricsTimeout)
	if interval < minMetricsInterval {
		interval, timeout = minMetricsInterval, minMetricsInterval/2
	}
	sustain := docEscapeSustain
	if bounded {
		sustain = docEscapeBoundedSustain
	}
	escape := durationLines(escapeSet, "hold", wall(docEscapeHold), "sustain", wall(sustain))
	weightsLines := durationLines(weightsSet, "min_interval", wall(docWeightsInterval))
	return fmt.Sprintf(`  # The documented defaults; durations in wall time at time scale %g.
  metrics {
    engine      = "vllm"
    interval    = %q
    timeout     = %q
    stale_after = %q
  }
  escape {
%s%s  }
  weights {
%s%s  }
`, timeScale, interval.String(), timeout.String(), (docStaleAfter * interval).String(),
		escape, escapeLines(escapeSet), weightsLines, escapeLines(weightsSet))
}

// durationLines writes each named duration (name, value pairs) as an
// attribute line, but those that set already names; a zero duration is
// left out, as it is the default.
func durationLines(set []string, pairs ...any) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		name, d := pairs[i].(string), pairs[i+1].(time.Duration)
		if d == 0 || slices.ContainsFunc(set, func(a string) bool {
			k, _, _ := strings.Cut(a, "=")
			return strings.TrimSpace(k) == name
		}) {
			continue
		}
		fmt.Fprintf(&b, "    %s = %q\n", name, d.String())
	}
	return b.String()
}

// HotKeysBlock is a hash mode's hot_keys block (inside its hash block) as
// a policy written from the policy reference has it: nothing, since hot
// keys are on by default, but for the durations, whose defaults
// (fleet.DefaultHotKeysInterval between two table changes,
// fleet.DefaultHotKeysHalfLife of a key's observed load) are engine time
// and so are divided by the time scale into kvxds's wall time, as
// DeployedBlocks does; the durations are left out at scale 1. values,
// if any, are declared always hot, as values of SessionHeader (a
// declared block). off turns hot keys off instead (the ablation,
// Config.NoHotKeys).
func HotKeysBlock(timeScale float64, off bool, values []string) string {
	if off {
		return "    hot_keys { enabled = false }\n"
	}
	var b strings.Builder
	if timeScale > 0 && timeScale != 1 {
		wall := func(d time.Duration) string {
			return time.Duration(float64(d) / timeScale).Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "      # durations in wall time at time scale %g\n      interval  = %q\n      half_life = %q\n",
			timeScale, wall(fleet.DefaultHotKeysInterval), wall(fleet.DefaultHotKeysHalfLife))
	}
	if len(values) > 0 {
		quoted := make([]string, len(values))
		for i, v := range values {
			quoted[i] = fmt.Sprintf("%q", v)
		}
		fmt.Fprintf(&b, "      declared {\n        header = %q\n        values = [%s]\n      }\n", SessionHeader, strings.Join(quoted, ", "))
		if len(values) > fleet.DefaultHotKeysMax {
			fmt.Fprintf(&b, "      max = %d\n", len(values))
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "    # Hot keys at their defaults.\n    hot_keys {\n" + b.String() + "    }\n"
}

// escapeLines writes each attribute on its own line of the escape block.
func escapeLines(set []string) string {
	var b strings.Builder
	for _, a := range set {
		fmt.Fprintf(&b, "    %s\n", strings.TrimSpace(a))
	}
	return b.String()
}

// AdaptersBlock is KVXDSAdapters' adapters block as a policy written from
// the policy reference has it for the bench's fleet: the base model the
// clients name (chatModel, so that its requests use no adapter), the
// engines' max_lora (which they also report, and kvxds believes), and the
// default header and body field; the durations, whose defaults
// (fleet.DefaultAdaptersInterval between two placement changes,
// fleet.DefaultAdaptersHalfLife of an adapter's observed demand) are
// engine time, divided by the time scale into kvxds's wall time, as
// DeployedBlocks does.
func AdaptersBlock(timeScale float64, maxLoRA int) string {
	if !(timeScale > 0) {
		timeScale = 1
	}
	wall := func(d time.Duration) string {
		return time.Duration(float64(d) / timeScale).Round(time.Millisecond).String()
	}
	return fmt.Sprintf(`  # LoRA adapters; durations in wall time at time scale %g.
  adapters {
    base_models = [%q]
    max_lora    = %d
    interval    = %q
    half_life   = %q
  }
`, timeScale, chatModel, max(maxLoRA, 1), wall(fleet.DefaultAdaptersInterval), wall(fleet.DefaultAdaptersHalfLife))
}
