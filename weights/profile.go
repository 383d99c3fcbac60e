package weights

import "slices"

// Series names one metric, optionally restricted to label values.
//
// A Name ending in "_total" also matches a counter family exposed under its
// base name (OpenMetrics decoders name counter families without the suffix;
// the text format prints the sample name). Series never match "_created"
// series: those are counter/histogram creation timestamps, not values.
type Series struct {
	Name string
	// Labels, if set, keep only series carrying exactly these label values.
	Labels map[string]string
	// Scale multiplies the value, e.g. 0.01 for a percentage; 0 means 1.
	// For a histogram it multiplies the bucket bounds and the sum (a unit
	// change), not the counts.
	Scale float64
}

// Profile maps an engine's metrics to Signals. Each signal lists
// alternatives: the first one present on the page wins, so one profile
// serves several engine versions (vLLM V1 and the older V0 names). An
// alternative is present when at least one of its series survives the label
// and model filters; an empty list means the engine exports no such signal
// (the signal is NaN, TTFT nil).
type Profile struct {
	Name string

	QueueDepth    []Series
	Running       []Series
	KVOccupancy   []Series
	Preemptions   []Series
	PrefixQueries []Series
	PrefixHits    []Series
	PrefixHitRate []Series
	TTFT          []Series
}

// Clone returns a deep copy of p, so that a caller may adapt a built-in
// profile without changing it for everybody else.
func (p *Profile) Clone() *Profile {
	if p == nil {
		return nil
	}
	c := *p
	for _, l := range []*[]Series{&c.QueueDepth, &c.Running, &c.KVOccupancy, &c.Preemptions,
		&c.PrefixQueries, &c.PrefixHits, &c.PrefixHitRate, &c.TTFT} {
		*l = cloneSeries(*l)
	}
	return &c
}

func cloneSeries(in []Series) []Series {
	if in == nil {
		return nil
	}
	out := make([]Series, len(in))
	for i, s := range in {
		out[i] = s
		if s.Labels != nil {
			out[i].Labels = make(map[string]string, len(s.Labels))
			for k, v := range s.Labels {
				out[i].Labels[k] = v
			}
		}
	}
	return out
}

func profileSeries(names ...string) []Series {
	out := make([]Series, len(names))
	for i, n := range names {
		out[i] = Series{Name: n}
	}
	return out
}

// builtinProfiles are the engines' own metric names (shared/design/NOTES.md §4).
var builtinProfiles = map[string]Profile{
	// vLLM, V1 names first, then the names V0 and early V1 (≤ 0.8) used.
	// Labels model_name and engine (one series per data-parallel engine,
	// summed). Not mapped: vllm:num_requests_swapped (V0 swap preemption).
	// Swapped sequences are counted in vllm:num_preemptions_total and show
	// as KV pressure; recompute-preempted ones (V0's default) are already
	// back in the waiting queue. Adding swapped to the queue would need a
	// sum of two metrics, which alternatives cannot express, for a gauge
	// that is 0 outside beam search.
	"vllm": {
		Name:       "vllm",
		QueueDepth: profileSeries("vllm:num_requests_waiting"),
		Running:    profileSeries("vllm:num_requests_running"),
		// kv_cache_usage_perc is a fraction 0..1 despite its name.
		KVOccupancy:   profileSeries("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
		Preemptions:   profileSeries("vllm:num_preemptions_total"),
		PrefixQueries: profileSeries("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
		PrefixHits:    profileSeries("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
		// V0 only; -1 when prefix caching is off (see Extract).
		PrefixHitRate: profileSeries("vllm:gpu_prefix_cache_hit_rate"),
		TTFT:          profileSeries("vllm:time_to_first_token_seconds"),
	},
	// SGLang. Scheduler gauges carry model_name, engine_type, tp_rank and
	// pp_rank (dp_rank with DP attention). Only the first attention-TP rank
	// of each DP group logs them, so several tp_rank series are distinct
	// schedulers and are summed. token_usage is a fraction 0..1. Tokenizer
	// counters (model_name only) count tokens: cached_tokens are the prefix
	// hits, prompt_tokens the lookups.
	//
	// Preemptions is left empty: sglang:num_retracted_reqs is a gauge of the
	// requests retracted at the latest decode step, not a cumulative
	// counter, and Step's rate of a gauge would be meaningless (a constant
	// 2 reads as no preemption, a drop to 0 as a counter reset). Retracted
	// requests go back to the waiting queue, so retraction still shows in
	// QueueDepth and in token_usage.
	"sglang": {
		Name:          "sglang",
		QueueDepth:    profileSeries("sglang:num_queue_reqs"),
		Running:       profileSeries("sglang:num_running_reqs"),
		KVOccupancy:   profileSeries("sglang:token_usage"),
		PrefixQueries: profileSeries("sglang:prompt_tokens_total"),
		PrefixHits:    profileSeries("sglang:cached_tokens_total"),
		PrefixHitRate: profileSeries("sglang:cache_hit_rate"),
		TTFT:          profileSeries("sglang:time_to_first_token_seconds"),
	},
	// Text Generation Inference (metrics-exporter-prometheus, no labels).
	// TGI exports no KV-cache usage, no preemption or prefix-cache metric,
	// and no TTFT: tgi_request_queue_duration is time in the queue only.
	"tgi": {
		Name:       "tgi",
		QueueDepth: profileSeries("tgi_queue_size"),
		Running:    profileSeries("tgi_batch_current_size"),
	},
	// TensorRT-LLM's trtllm-serve (labels model_name, engine_type).
	// Assumed from the collector's documentation: kv_cache_utilization and
	// kv_cache_hit_rate are fractions 0..1 (used/total blocks, reused/
	// (reused+missed) blocks). No preemption or prefix-token counters.
	"trtllm": {
		Name:          "trtllm",
		QueueDepth:    profileSeries("trtllm_num_requests_waiting"),
		Running:       profileSeries("trtllm_num_requests_running"),
		KVOccupancy:   profileSeries("trtllm_kv_cache_utilization"),
		PrefixHitRate: profileSeries("trtllm_kv_cache_hit_rate"),
		TTFT:          profileSeries("trtllm_time_to_first_token_seconds"),
	},
}

// BuiltinProfile returns a copy of the built-in profile for engine ("vllm",
// "sglang", "tgi", "trtllm"); the caller may modify it.
func BuiltinProfile(engine string) (*Profile, bool) {
	p, ok := builtinProfiles[engine]
	if !ok {
		return nil, false
	}
	return p.Clone(), true
}

// BuiltinEngines returns the names BuiltinProfile knows, in registry
// order.
func BuiltinEngines() []string { return slices.Clone(builtinEngines) }
