package sim

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Histogram buckets of vLLM V1's PrometheusStatLogger (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
		20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	interTokenBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
)

// Finish reasons, the finished_reason label of vllm:request_success_total.
const (
	finishLength = "length"
	finishStop   = "stop"
	finishAbort  = "abort"
)

// Metric names exported on /metrics, exactly as vLLM V1 prints them.
const (
	MetricRunning          = "vllm:num_requests_running"
	MetricWaiting          = "vllm:num_requests_waiting"
	MetricKVUsage          = "vllm:kv_cache_usage_perc"
	MetricCacheConfig      = "vllm:cache_config_info"
	MetricPreemptions      = "vllm:num_preemptions_total"
	MetricPrefixQueries    = "vllm:prefix_cache_queries_total"
	MetricPrefixHits       = "vllm:prefix_cache_hits_total"
	MetricPromptTokens     = "vllm:prompt_tokens_total"
	MetricGenerationTokens = "vllm:generation_tokens_total"
	MetricRequestSuccess   = "vllm:request_success_total"
	MetricTTFT             = "vllm:time_to_first_token_seconds"
	MetricE2E              = "vllm:e2e_request_latency_seconds"
	MetricQueueTime        = "vllm:request_queue_time_seconds"
	MetricInterToken       = "vllm:inter_token_latency_seconds"
	MetricLoRAInfo         = "vllm:lora_requests_info"

	// vLLM's counters of the KV connector's prefix lookups, exported by a
	// replica with a P/D role only (an engine with a KV connector).
	MetricExternalQueries = "vllm:external_prefix_cache_queries_total"
	MetricExternalHits    = "vllm:external_prefix_cache_hits_total"

	// The simulator's own counters, which no engine exports: adapters
	// loaded into a slot and adapters unloaded to make room.
	MetricLoRASwapIns   = "sim:lora_swap_ins_total"
	MetricLoRAEvictions = "sim:lora_evictions_total"
	// Requests admitted after being passed over for want of an adapter
	// slot, and their waits from the first pass-over to admission.
	MetricLoRASlotWaits       = "sim:lora_slot_waits_total"
	MetricLoRASlotWaitSeconds = "sim:lora_slot_wait_seconds_total"

	// Prefill/decode counters of a decode replica, exported by a replica
	// with a P/D role only: requests prefilled on a prefill replica,
	// requests prefilled locally by reason (no_header: no prefill replica
	// named; failed: the named one failed), and prompt tokens whose KV
	// was transferred.
	MetricPDRemotePrefills    = "sim:pd_remote_prefills_total"
	MetricPDLocalPrefills     = "sim:pd_local_prefills_total"
	MetricPDTransferredTokens = "sim:pd_transferred_tokens_total"
)

// Reasons a decode replica prefills locally, the reason label of
// sim:pd_local_prefills_total.
const (
	localNoHeader = "no_header"
	localFailed   = "failed"
)

// metrics is one replica's vLLM-compatible metric set on its own registry.
// Labels are vLLM V1's: model_name and engine ("0", the only engine core).
type metrics struct {
	reg *prometheus.Registry

	preemptions      prometheus.Counter
	prefixQueries    prometheus.Counter
	prefixHits       prometheus.Counter
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	success          map[string]prometheus.Counter
	ttft             prometheus.Observer
	e2e              prometheus.Observer
	queueTime        prometheus.Observer
	interToken       prometheus.Observer
	loraSwapIns      prometheus.Counter
	loraEvictions    prometheus.Counter
	loraSlotWaits    prometheus.Counter
	loraSlotWaitSecs prometheus.Counter
	externalQueries  prometheus.Counter
	externalHits     prometheus.Counter
	pdRemote         prometheus.Counter
	pdLocal          map[string]prometheus.Counter
	pdTransferred    prometheus.Counter

	loraInfo    *prometheus.GaugeVec
	maxLoRA     string
	lastAdapter string           // the in-flight list of the last record
	loraSeries  prometheus.Gauge // its series
}

// recordLoRA is PrometheusStatLogger.record's vllm:lora_requests_info:
// the series of the adapters in flight (in both lists, as today's vLLM
// writes them) is set to the current Unix time; older series stay.
func (m *metrics) recordLoRA(inflight string, unix float64) {
	if m.loraSeries == nil || inflight != m.lastAdapter {
		m.loraSeries = m.loraInfo.WithLabelValues(m.maxLoRA, inflight, inflight)
		m.lastAdapter = inflight
	}
	m.loraSeries.Set(unix)
}

// gauges reads the scheduler state at scrape time.
type gauges interface {
	gaugeValues() (running, waiting int, kvUsage float64)
}

func newMetrics(cfg Config, g gauges) *metrics {
	labels := prometheus.Labels{"model_name": cfg.Model, "engine": "0"}
	reg := prometheus.NewRegistry()
	auto := promauto.With(reg)
	counter := func(name, help string) prometheus.Counter {
		return auto.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	histogram := func(name, help string, buckets []float64) prometheus.Observer {
		return auto.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
	}
	gauge := func(name, help string, f func() float64) {
		auto.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}

	m := &metrics{reg: reg}
	if g != nil {
		gauge(MetricRunning, "Number of requests in model execution batches.", func() float64 {
			r, _, _ := g.gaugeValues()
			return float64(r)
		})
		gauge(MetricWaiting, "Number of requests waiting to be processed.", func() float64 {
			_, w, _ := g.gaugeValues()
			return float64(w)
		})
		gauge(MetricKVUsage, "KV-cache usage. 1 means 100 percent usage.", func() float64 {
			_, _, u := g.gaugeValues()
			return u
		})
	}
	m.preemptions = counter(MetricPreemptions, "Cumulative number of preemption from the engine.")
	m.prefixQueries = counter(MetricPrefixQueries, "Prefix cache queries, in terms of number of queried tokens.")
	m.prefixHits = counter(MetricPrefixHits, "Prefix cache hits, in terms of number of cached tokens.")
	m.promptTokens = counter(MetricPromptTokens, "Number of prefill tokens processed.")
	m.generationTokens = counter(MetricGenerationTokens, "Number of generation tokens processed.")

	success := auto.NewCounterVec(prometheus.CounterOpts{
		Name: MetricRequestSuccess, Help: "Count of successfully processed requests.", ConstLabels: labels,
	}, []string{"finished_reason"})
	m.success = map[string]prometheus.Counter{}
	for _, reason := range []string{finishStop, finishLength, finishAbort} {
		m.success[reason] = success.WithLabelValues(reason)
	}

	m.ttft = histogram(MetricTTFT, "Histogram of time to first token in seconds.", ttftBuckets)
	m.e2e = histogram(MetricE2E, "Histogram of e2e request latency in seconds.", requestLatencyBuckets)
	m.queueTime = histogram(MetricQueueTime, "Histogram of time spent in WAITING phase for request.", requestLatencyBuckets)
	m.interToken = histogram(MetricInterToken, "Histogram of inter-token latency in seconds.", interTokenBuckets)

	// vLLM's adapter gauge has neither model_name nor engine
	// (loggers.py); its labels in vLLM's order.
	m.loraInfo = auto.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricLoRAInfo, Help: "Running stats on lora requests.",
	}, []string{"max_lora", "waiting_lora_adapters", "running_lora_adapters"})
	m.maxLoRA = strconv.Itoa(cfg.MaxLoRA)
	m.loraSwapIns = counter(MetricLoRASwapIns, "LoRA adapters loaded into a slot (simulator).")
	m.loraEvictions = counter(MetricLoRAEvictions, "LoRA adapters unloaded to make room for another (simulator).")
	m.loraSlotWaits = counter(MetricLoRASlotWaits, "Requests admitted after being passed over for want of a LoRA adapter slot (simulator).")
	m.loraSlotWaitSecs = counter(MetricLoRASlotWaitSeconds, "Seconds such requests waited from their first pass-over to admission (simulator).")

	// An engine without a KV connector exports none of these; they exist
	// unregistered so that the engine counts without asking.
	pd := promauto.With(nil)
	if cfg.Role != RoleBoth {
		pd = auto
	}
	m.externalQueries = pd.NewCounter(prometheus.CounterOpts{Name: MetricExternalQueries, ConstLabels: labels,
		Help: "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens."})
	m.externalHits = pd.NewCounter(prometheus.CounterOpts{Name: MetricExternalHits, ConstLabels: labels,
		Help: "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens."})
	m.pdRemote = pd.NewCounter(prometheus.CounterOpts{Name: MetricPDRemotePrefills, ConstLabels: labels,
		Help: "Requests prefilled on the prefill replica their x-prefiller-host-port names (simulator)."})
	local := pd.NewCounterVec(prometheus.CounterOpts{Name: MetricPDLocalPrefills, ConstLabels: labels,
		Help: "Requests a decode replica prefilled itself: no prefill replica named, or the named one failed (simulator)."},
		[]string{"reason"})
	m.pdLocal = map[string]prometheus.Counter{}
	for _, reason := range []string{localNoHeader, localFailed} {
		m.pdLocal[reason] = local.WithLabelValues(reason)
	}
	m.pdTransferred = pd.NewCounter(prometheus.CounterOpts{Name: MetricPDTransferredTokens, ConstLabels: labels,
		Help: "Prompt tokens whose KV a decode replica received from a prefill replica (simulator)."})

	// vllm:cache_config_info carries CacheConfig.metrics_info() as labels and
	// the engine index, but no model_name (loggers.py log_metrics_info).
	info := auto.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricCacheConfig, Help: "Information of the LLMEngine CacheConfig",
	}, []string{"block_size", "cache_dtype", "enable_prefix_caching", "engine",
		"gpu_memory_utilization", "num_cpu_blocks", "num_gpu_blocks", "prefix_caching_hash_algo"})
	info.WithLabelValues(strconv.Itoa(cfg.BlockSize), "auto", "True", "0", "0.9", "None",
		strconv.Itoa(cfg.KVBlocks), "sha256").Set(1)
	return m
}
