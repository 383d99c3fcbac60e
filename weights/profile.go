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
	// Labels, if set, keep only series carrying exactly these label values;
	// an empty value also keeps series without the label (in Prometheus an
	// empty label is no label).
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

	// EngineLabel names the label that tells one data-parallel engine
	// from another on one page (vLLM's engine, SGLang's dp_rank). Series
	// of different models are different engines too. See Extract for how
	// engines combine into the replica's signals.
	EngineLabel string
	// CopyLabels are labels whose values repeat one engine's state
	// rather than split it: SGLang with --enable-metrics-for-all-schedulers
	// writes the same scheduler state once per tensor- and
	// pipeline-parallel rank. Series that differ only in these are one.
	CopyLabels []string
	// UnnamedModel is a model_name value by which the engine says it does
	// not know the model's name (trtllm-serve's "undefined"); a model
	// filter keeps such series.
	UnnamedModel string
	// MetricsPath is where the engine serves its Prometheus page, the
	// default of a metrics block's path.
	MetricsPath string
	// Hint says what makes the engine export its core signals, for the
	// messages that say they are missing.
	Hint string

	QueueDepth    []Series
	Running       []Series
	KVOccupancy   []Series
	Preemptions   []Series
	PrefixQueries []Series
	PrefixHits    []Series
	PrefixHitRate []Series
	TTFT          []Series

	// LoRAInfo names an adapter-info gauge in vLLM's shape (labels
	// running_lora_adapters, waiting_lora_adapters, max_lora; the value a
	// Unix time, the newest series the current one): Signals.Adapters.
	// Not a policy signal: it feeds no weight.
	LoRAInfo []Series
}

// Clone returns a deep copy of p, so that a caller may adapt a built-in
// profile without changing it for everybody else.
func (p *Profile) Clone() *Profile {
	if p == nil {
		return nil
	}
	c := *p
	c.CopyLabels = slices.Clone(p.CopyLabels)
	for _, l := range []*[]Series{&c.QueueDepth, &c.Running, &c.KVOccupancy, &c.Preemptions,
		&c.PrefixQueries, &c.PrefixHits, &c.PrefixHitRate, &c.TTFT, &c.LoRAInfo} {
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

// builtinProfiles are the engines' own metric names, as their current
// sources export them and as their older versions did (testdata/README.md
// names the files and versions each fixture follows).
var builtinProfiles = map[string]Profile{
	// vLLM (vllm/v1/metrics/loggers.py), V1 names first, then the names
	// V0 and early V1 (≤ 0.8) used. Labels model_name and engine (one
	// series per data-parallel engine). Not mapped:
	// vllm:num_requests_swapped (V0 swap preemption). Swapped sequences
	// are counted in vllm:num_preemptions_total and show as KV pressure;
	// recompute-preempted ones (V0's default) are already back in the
	// waiting queue. Adding swapped to the queue would need a sum of two
	// metrics, which alternatives cannot express, for a gauge that is 0
	// outside beam search.
	"vllm": {
		Name:        "vllm",
		EngineLabel: "engine",
		MetricsPath: DefaultMetricsPath,
		QueueDepth:  profileSeries("vllm:num_requests_waiting"),
		Running:     profileSeries("vllm:num_requests_running"),
		// kv_cache_usage_perc is a fraction 0..1 despite its name.
		KVOccupancy:   profileSeries("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
		Preemptions:   profileSeries("vllm:num_preemptions_total"),
		PrefixQueries: profileSeries("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
		PrefixHits:    profileSeries("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
		// V0 only; -1 when prefix caching is off (see Extract).
		PrefixHitRate: profileSeries("vllm:gpu_prefix_cache_hit_rate"),
		TTFT:          profileSeries("vllm:time_to_first_token_seconds"),
		// With --enable-lora. SGLang's lora_pool_slots_* count adapters
		// but name none, and TGI and trtllm-serve export nothing of
		// adapters: no LoRAInfo for them.
		LoRAInfo: profileSeries("vllm:lora_requests_info"),
	},
	// SGLang (sglang/srt/observability/metrics_collector.py, formerly
	// sglang/srt/metrics/collector.py). Scheduler series carry
	// model_name, engine_type, tp_rank, pp_rank, moe_ep_rank (since 2025),
	// dp_rank with data parallelism, and priority with priority
	// scheduling: priority="" is the total, and one series per priority
	// value splits it, so only the total is read (older versions have no
	// priority label, which matches "" too). Only the first attention-TP
	// rank of each data-parallel group writes them, unless
	// --enable-metrics-for-all-schedulers makes every rank write the same
	// state: the rank labels are copies. token_usage is a fraction 0..1
	// (today the fullest of the KV, SWA and Mamba pools). Tokenizer
	// counters count tokens: cached_tokens are the prefix hits (split by
	// cache_source: device, host, storage), prompt_tokens the lookups
	// (split by is_streaming).
	//
	// Preemptions: sglang:num_retracted_requests_total, the counter of
	// retracted requests. Older versions export only
	// sglang:num_retracted_reqs, a gauge of the requests retracted at the
	// latest decode step, which Step's counter rate cannot read (a constant
	// 2 reads as no preemption, a drop to 0 as a counter reset); there,
	// retraction shows in QueueDepth and token_usage only.
	"sglang": {
		Name:          "sglang",
		EngineLabel:   "dp_rank",
		CopyLabels:    []string{"tp_rank", "pp_rank", "moe_ep_rank"},
		MetricsPath:   DefaultMetricsPath,
		Hint:          "SGLang exports them with --enable-metrics",
		QueueDepth:    []Series{{Name: "sglang:num_queue_reqs", Labels: map[string]string{"priority": ""}}},
		Running:       []Series{{Name: "sglang:num_running_reqs", Labels: map[string]string{"priority": ""}}},
		KVOccupancy:   profileSeries("sglang:token_usage"),
		Preemptions:   profileSeries("sglang:num_retracted_requests_total"),
		PrefixQueries: profileSeries("sglang:prompt_tokens_total"),
		PrefixHits:    profileSeries("sglang:cached_tokens_total"),
		PrefixHitRate: profileSeries("sglang:cache_hit_rate"),
		TTFT:          profileSeries("sglang:time_to_first_token_seconds"),
	},
	// Text Generation Inference (metrics-exporter-prometheus, no labels).
	// TGI exports no KV-cache usage, no preemption or prefix-cache metric,
	// and no TTFT: tgi_request_queue_duration is time in the queue only.
	"tgi": {
		Name:        "tgi",
		MetricsPath: DefaultMetricsPath,
		QueueDepth:  profileSeries("tgi_queue_size"),
		Running:     profileSeries("tgi_batch_current_size"),
	},
	// TensorRT-LLM's trtllm-serve (tensorrt_llm/serve/openai_server.py,
	// tensorrt_llm/metrics/collector.py). /metrics answers JSON iteration
	// stats; the Prometheus page is /prometheus/metrics, served only with
	// return_perf_metrics, under model_name="undefined". Queue, running
	// and KV utilisation (used/max blocks) come from iteration stats,
	// which the PyTorch backend collects only with enable_iter_perf_stats.
	// kv_cache_hit_rate is a gauge since start, so the prompt token
	// counters come first: the cached ones are the prefix hits. The block
	// counters (reused, missed) would need their sum as the lookups, which
	// alternatives cannot express. No preemption counter.
	"trtllm": {
		Name:         "trtllm",
		UnnamedModel: "undefined",
		// Its gauges carry the writing process's pid (multiprocess mode
		// "all"): one server process writes them, and a dead one's
		// leftovers must not add to it.
		CopyLabels:    []string{"pid"},
		MetricsPath:   "/prometheus/metrics",
		Hint:          "trtllm-serve exports queue, running and KV usage only with return_perf_metrics: true and, on the PyTorch backend, enable_iter_perf_stats: true in its --extra_llm_api_options (--config) file",
		QueueDepth:    profileSeries("trtllm_num_requests_waiting"),
		Running:       profileSeries("trtllm_num_requests_running"),
		KVOccupancy:   profileSeries("trtllm_kv_cache_utilization"),
		PrefixQueries: profileSeries("trtllm_prompt_tokens_total"),
		PrefixHits:    profileSeries("trtllm_prompt_cached_tokens_total"),
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
