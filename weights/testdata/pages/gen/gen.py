#!/usr/bin/env python3
"""Regenerates the engine exposition fixtures in ../ (weights/testdata/pages).

The pages are rendered by the real Python prometheus_client (Debian's
python3-prometheus-client, 0.16), as vLLM, SGLang and trtllm-serve render
theirs, so that line order, label order (sorted), float formatting, the
_created series and HELP/TYPE lines are what the engines print. Metric names,
help texts, label sets and bucket layouts are transcribed from the engines'
sources (vllm/v1/metrics/loggers.py, vllm/engine/metrics.py,
sglang/srt/metrics/collector.py and its successor
sglang/srt/observability/metrics_collector.py,
tensorrt_llm/metrics/collector.py, tensorrt_llm/serve/openai_server.py,
prometheus-fastapi-instrumentator's default metrics); TGI's page is
formatted here the way the Rust metrics-exporter-prometheus crate does.

Values are fixed (binary fractions where they are summed or averaged) so that
weights/profile_test.go can assert them exactly. ../../README.md lists
which upstream file and version each page follows. Clock-dependent values
(_created, process_*) are fixed too, so the output is reproducible:

    apt-get install python3-prometheus-client
    /usr/bin/python3 weights/testdata/pages/gen/gen.py

The malformed pages (garbage, truncated, nan_kv, ...) are written here as
well, from the same building blocks.
"""
import os
import sys
import tempfile
import time

# Fixed clock: every _created series reads this.
CREATED = 1751385600.123456
time.time = lambda: CREATED

MULTIPROC_DIR = tempfile.mkdtemp(prefix="kvxds-prom-")

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary  # noqa: E402
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: E402
from prometheus_client.exposition import generate_latest  # noqa: E402
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN = "Qwen/Qwen2.5-7B-Instruct"


def write(name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    print(f"{name}: {len(data)} bytes, {sum(1 for l in data.decode().splitlines() if l and not l.startswith('#'))} samples")


# ---------------------------------------------------------------------------
# Python runtime collectors, with fixed values (the real ones read /proc and gc).

class FixedRuntimeCollector:
    """Same families, help texts and order as prometheus_client's default
    GC_COLLECTOR, PLATFORM_COLLECTOR and PROCESS_COLLECTOR."""

    def collect(self):
        gen = ["0", "1", "2"]
        c = CounterMetricFamily("python_gc_objects_collected", "Objects collected during gc", labels=["generation"])
        for g, v in zip(gen, [18234, 3291, 512]):
            c.add_metric([g], v)
        yield c
        c = CounterMetricFamily("python_gc_objects_uncollectable", "Uncollectable objects found during GC", labels=["generation"])
        for g in gen:
            c.add_metric([g], 0)
        yield c
        c = CounterMetricFamily("python_gc_collections", "Number of times this generation was collected", labels=["generation"])
        for g, v in zip(gen, [2304, 209, 14]):
            c.add_metric([g], v)
        yield c
        i = GaugeMetricFamily("python_info", "Python platform information",
                              labels=["implementation", "major", "minor", "patchlevel", "version"])
        i.add_metric(["CPython", "3", "12", "11", "3.12.11"], 1)
        yield i
        yield GaugeMetricFamily("process_virtual_memory_bytes", "Virtual memory size in bytes.", value=7.1309877248e+10)
        yield GaugeMetricFamily("process_resident_memory_bytes", "Resident memory size in bytes.", value=2.849435648e+09)
        yield GaugeMetricFamily("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", value=1751385500.25)
        yield CounterMetricFamily("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", value=1893.42)
        yield GaugeMetricFamily("process_open_fds", "Number of open file descriptors.", value=87)
        yield GaugeMetricFamily("process_max_fds", "Maximum number of open file descriptors.", value=1048576)


def observe(h, obs):
    """obs: list of (value, times)."""
    for v, n in obs:
        for _ in range(n):
            h.observe(v)


# ---------------------------------------------------------------------------
# vLLM V1 (vllm/v1/metrics/loggers.py, ~v0.10/0.11), labels model_name, engine.

def build_1_2_5(max_value):
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** exp
            if v > max_value:
                return out
            out.append(v)
        exp += 1


TTFT_BUCKETS_V1 = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                   20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
REQ_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                       480.0, 960.0, 1920.0, 7680.0]


def vllm_v1(reg, engines, max_model_len=8192):
    """engines: list of dicts with model, engine and the values to set."""
    L = ["model_name", "engine"]
    running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", L, registry=reg)
    waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", L, registry=reg)
    kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", L, registry=reg)
    pq = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", L, registry=reg)
    ph = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", L, registry=reg)
    preempt = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", L, registry=reg)
    prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", L, registry=reg)
    gen = Counter("vllm:generation_tokens", "Number of generation tokens processed.", L, registry=reg)
    success = Counter("vllm:request_success", "Count of successfully processed requests.", L + ["finished_reason"], registry=reg)
    tok_buckets = build_1_2_5(max_model_len)
    h_prompt = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", L, buckets=tok_buckets, registry=reg)
    h_gen = Histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", L, buckets=tok_buckets, registry=reg)
    h_iter = Histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", L,
                       buckets=[1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384], registry=reg)
    h_maxgen = Histogram("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", L,
                         buckets=tok_buckets, registry=reg)
    h_n = Histogram("vllm:request_params_n", "Histogram of the n request parameter.", L, buckets=[1, 2, 5, 10, 20], registry=reg)
    h_maxtok = Histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", L, buckets=tok_buckets, registry=reg)
    h_ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", L, buckets=TTFT_BUCKETS_V1, registry=reg)
    h_itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", L, buckets=ITL_BUCKETS, registry=reg)
    h_e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", L, buckets=REQ_LATENCY_BUCKETS, registry=reg)
    h_queue = Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", L, buckets=REQ_LATENCY_BUCKETS, registry=reg)
    h_inf = Histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", L, buckets=REQ_LATENCY_BUCKETS, registry=reg)
    h_prefill = Histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", L, buckets=REQ_LATENCY_BUCKETS, registry=reg)
    h_decode = Histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", L, buckets=REQ_LATENCY_BUCKETS, registry=reg)

    info_labels = ["block_size", "cache_dtype", "calculate_kv_scales", "cpu_offload_gb", "enable_prefix_caching", "engine",
                   "gpu_memory_utilization", "is_attention_free", "num_cpu_blocks", "num_gpu_blocks", "num_gpu_blocks_override",
                   "prefix_caching_hash_algo", "sliding_window", "swap_space", "swap_space_bytes"]
    info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", info_labels, registry=reg)

    for e in engines:
        lv = (e["model"], e["engine"])
        running.labels(*lv).set(e["running"])
        waiting.labels(*lv).set(e["waiting"])
        kv.labels(*lv).set(e["kv"])
        pq.labels(*lv).inc(e["queries"])
        ph.labels(*lv).inc(e["hits"])
        preempt.labels(*lv).inc(e["preemptions"])
        prompt.labels(*lv).inc(e["queries"])
        gen.labels(*lv).inc(e["gen_tokens"])
        for reason, n in (("stop", e["requests"] - 3), ("length", 3), ("abort", 0)):
            success.labels(*lv, reason).inc(n)
        n_req = sum(n for _, n in e["ttft"])
        observe(h_ttft.labels(*lv), e["ttft"])
        observe(h_prompt.labels(*lv), [(1800, n_req - 5), (6000, 5)])
        observe(h_gen.labels(*lv), [(180, n_req - 3), (1024, 3)])
        observe(h_maxgen.labels(*lv), [(1024, n_req)])
        observe(h_maxtok.labels(*lv), [(1024, n_req)])
        observe(h_n.labels(*lv), [(1, n_req)])
        observe(h_iter.labels(*lv), [(12, 4000), (512, n_req), (2048, 40)])
        observe(h_itl.labels(*lv), [(0.0234375, 9000), (0.046875, 300), (0.25, 5)])
        observe(h_e2e.labels(*lv), [(4.5, n_req - 2), (22.0, 2)])
        observe(h_queue.labels(*lv), [(0.015625, n_req - 4), (0.75, 4)])
        observe(h_inf.labels(*lv), [(4.25, n_req)])
        observe(h_prefill.labels(*lv), [(0.125, n_req)])
        observe(h_decode.labels(*lv), [(4.125, n_req)])
        info.labels(block_size="16", cache_dtype="auto", calculate_kv_scales="False", cpu_offload_gb="0",
                    enable_prefix_caching="True", engine=e["engine"], gpu_memory_utilization="0.9",
                    is_attention_free="False", num_cpu_blocks="None", num_gpu_blocks="27153",
                    num_gpu_blocks_override="None", prefix_caching_hash_algo="sha256", sliding_window="None",
                    swap_space="4", swap_space_bytes="4294967296").set(1)


def fastapi_instrumentator(reg):
    """prometheus-fastapi-instrumentator's metrics.default(), as vLLM's
    api_server mounts it (/metrics, /health, ... excluded)."""
    total = Counter("http_requests_total", "Total number of requests by method, status and handler.",
                    ["handler", "method", "status"], registry=reg)
    req_size = Summary("http_request_size_bytes",
                       "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
                       ["handler"], registry=reg)
    resp_size = Summary("http_response_size_bytes",
                        "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
                        ["handler"], registry=reg)
    highr = Histogram("http_request_duration_highr_seconds",
                      "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
                      buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10, 30, 60],
                      registry=reg)
    dur = Histogram("http_request_duration_seconds",
                    "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ",
                    ["handler", "method"], buckets=[0.1, 0.5, 1], registry=reg)
    for handler, n, size in (("/v1/chat/completions", 1520, 2380), ("/v1/models", 12, 0)):
        total.labels(handler, "POST" if "chat" in handler else "GET", "2xx").inc(n)
        for _ in range(n):
            req_size.labels(handler).observe(size)
            resp_size.labels(handler).observe(1750 if size else 512)
            lat = 4.5 if size else 0.00390625
            highr.observe(lat)
            dur.labels(handler, "POST" if "chat" in handler else "GET").observe(lat)


def vllm_page(engines, openmetrics=False, max_model_len=8192):
    reg = CollectorRegistry(auto_describe=True)
    reg.register(FixedRuntimeCollector())
    vllm_v1(reg, engines, max_model_len)
    fastapi_instrumentator(reg)
    return generate_openmetrics(reg) if openmetrics else generate_latest(reg)


# Per-engine values. TTFT observations are binary fractions so sums are exact.
LLAMA_E0 = dict(model=LLAMA, engine="0", waiting=3, running=12, kv=0.4375, queries=1234567, hits=987654,
                preemptions=7, gen_tokens=402311, requests=52,
                ttft=[(0.0078125, 2), (0.03125, 5), (0.0625, 10), (0.125, 20), (0.375, 8), (0.75, 4), (1.5, 2), (3.0, 1)])
LLAMA_E1 = dict(model=LLAMA, engine="1", waiting=5, running=9, kv=0.8125, queries=2000000, hits=500000,
                preemptions=2, gen_tokens=300000, requests=20,
                ttft=[(0.0625, 4), (0.125, 10), (0.5, 5), (12.0, 1)])
QWEN_E0 = dict(model=QWEN, engine="0", waiting=1, running=4, kv=0.125, queries=4096, hits=1024,
               preemptions=0, gen_tokens=8192, requests=6,
               ttft=[(0.03125, 3), (0.25, 3)])


# vLLM's LoRA gauge (vllm/v1/metrics/loggers.py, PrometheusStatLogger): no
# model_name or engine label; each record() with scheduler stats calls
# set_to_current_time() on the series of the adapter names then in flight,
# and a series, once created, stays on the page with its last time. The
# names come from LoRARequestStates.update_scheduler_stats
# (vllm/v1/metrics/stats.py), which writes every adapter with a request in
# flight into both dicts, so running and waiting list the same names.
LORA_T0 = 1751385600.5


def vllm_lora(reg, series):
    """series: (max_lora, waiting, running, time) as record() leaves them."""
    g = Gauge("vllm:lora_requests_info", "Running stats on lora requests.",
              ["max_lora", "waiting_lora_adapters", "running_lora_adapters"], registry=reg)
    for max_lora, waiting, running, t in series:
        g.labels(max_lora, waiting, running).set(t)  # set_to_current_time() at t


# An engine with --max-loras 4 that served sql-lora, then sql-lora and
# chat-lora together, then chat-lora alone: the newest series (the largest
# time, not the last line) is the state.
LORA_HISTORY = [
    ("4", "", "", LORA_T0),
    ("4", "sql-lora,chat-lora", "sql-lora,chat-lora", LORA_T0 + 20.25),
    ("4", "chat-lora", "chat-lora", LORA_T0 + 31.5),
    ("4", "sql-lora", "sql-lora", LORA_T0 + 10.0),
]


def vllm_lora_page(series, openmetrics=False):
    reg = CollectorRegistry(auto_describe=True)
    reg.register(FixedRuntimeCollector())
    vllm_v1(reg, [LLAMA_E0])
    vllm_lora(reg, series)
    fastapi_instrumentator(reg)
    return generate_openmetrics(reg) if openmetrics else generate_latest(reg)


# ---------------------------------------------------------------------------
# vLLM V0 (vllm/engine/metrics.py, ~v0.6): labels model_name only; swapped,
# gpu/cpu cache usage, gpu/cpu prefix cache hit rate; no prefix counters.

def vllm_v0_page(hit_rate=0.375):
    reg = CollectorRegistry(auto_describe=True)
    reg.register(FixedRuntimeCollector())
    L = ["model_name"]
    info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                 ["block_size", "cache_dtype", "cpu_offload_gb", "enable_prefix_caching", "gpu_memory_utilization",
                  "is_attention_free", "num_cpu_blocks", "num_gpu_blocks", "num_gpu_blocks_override", "sliding_window",
                  "swap_space_bytes"], registry=reg)
    info.labels("16", "auto", "0", "True", "0.9", "False", "2048", "27153", "None", "None", "4294967296").set(1)
    Gauge("vllm:num_requests_running", "Number of requests currently running on GPU.", L, registry=reg).labels(LLAMA).set(7)
    Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", L, registry=reg).labels(LLAMA).set(2)
    Gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.", L, registry=reg).labels(LLAMA).set(1)
    Gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", L, registry=reg).labels(LLAMA).set(0.91)
    Gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", L, registry=reg).labels(LLAMA).set(0.03125)
    Gauge("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.", L, registry=reg).labels(LLAMA).set(-1)
    Gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", L, registry=reg).labels(LLAMA).set(hit_rate)
    Gauge("vllm:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s.", L, registry=reg).labels(LLAMA).set(1840.5)
    Gauge("vllm:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s.", L, registry=reg).labels(LLAMA).set(611.25)
    Counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", L, registry=reg).labels(LLAMA).inc(4)
    Counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", L, registry=reg).labels(LLAMA).inc(904512)
    Counter("vllm:generation_tokens_total", "Number of generation tokens processed.", L, registry=reg).labels(LLAMA).inc(213377)
    h = Histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", L,
                  buckets=[1, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256, 512, 1024, 2048, 4096, 8192],
                  registry=reg)
    observe(h.labels(LLAMA), [(7, 3000), (300, 200)])
    h = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", L,
                  buckets=[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0], registry=reg)
    observe(h.labels(LLAMA), [(0.0625, 6), (0.25, 2), (6.0, 1), (12.5, 1)])
    h = Histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", L,
                  buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5], registry=reg)
    observe(h.labels(LLAMA), [(0.03125, 2000)])
    for name, doc in (("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds."),
                      ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
                      ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request."),
                      ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."),
                      ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.")):
        h = Histogram(name, doc, L, buckets=[0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0],
                      registry=reg)
        observe(h.labels(LLAMA), [(2.0, 10)])
    c = Counter("vllm:request_success_total", "Count of successfully processed requests.", L + ["finished_reason"], registry=reg)
    c.labels(LLAMA, "stop").inc(9)
    c.labels(LLAMA, "length").inc(1)
    fastapi_instrumentator(reg)
    return generate_latest(reg)


# vLLM V1 as of ~0.8 (before the 0.9 renames): gpu_cache_usage_perc and the
# gpu_prefix_cache_{queries,hits} counters, labels model_name only.
def vllm_v1_early_page():
    reg = CollectorRegistry(auto_describe=True)
    reg.register(FixedRuntimeCollector())
    L = ["model_name"]
    Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", L, registry=reg).labels(LLAMA).set(10)
    Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", L, registry=reg).labels(LLAMA).set(0)
    Gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", L, registry=reg).labels(LLAMA).set(0.5)
    Counter("vllm:gpu_prefix_cache_queries", "GPU prefix cache queries, in terms of number of queried blocks.", L, registry=reg).labels(LLAMA).inc(64000)
    Counter("vllm:gpu_prefix_cache_hits", "GPU prefix cache hits, in terms of number of cached blocks.", L, registry=reg).labels(LLAMA).inc(16000)
    Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", L, registry=reg).labels(LLAMA).inc(0)
    Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", L, registry=reg).labels(LLAMA).inc(1024000)
    Counter("vllm:generation_tokens", "Number of generation tokens processed.", L, registry=reg).labels(LLAMA).inc(250000)
    h = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", L,
                  buckets=[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0],
                  registry=reg)
    observe(h.labels(LLAMA), [(0.125, 3)])
    fastapi_instrumentator(reg)
    return generate_latest(reg)


# ---------------------------------------------------------------------------
# SGLang (sglang/srt/metrics/collector.py). SGLang always runs
# prometheus_client in multiprocess mode: no _created series, no
# python_*/process_* families, histograms print _sum before their buckets.
# Scheduler gauges carry model_name, engine_type, tp_rank, pp_rank (and
# dp_rank under DP attention); tokenizer counters/histograms model_name only.
# Gauges are multiprocess_mode="mostrecent" in SGLang; 0.16 lacks that mode,
# "max" renders identically for one writer per label set.

SGL_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SGL_E2E = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800]
SGL_ITL = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200,
           0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000]


def sglang_page(ranks, name):
    from prometheus_client import multiprocess, values
    d = os.path.join(MULTIPROC_DIR, name)
    os.makedirs(d)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = d
    values.ValueClass = values.get_value_class()
    model = "meta-llama/Llama-3.1-8B-Instruct"
    SL = ["model_name", "engine_type", "tp_rank", "pp_rank"] + (["dp_rank"] if len(ranks) > 1 else [])
    g = {}
    for n, doc in (("num_running_reqs", "The number of running requests."),
                   ("num_used_tokens", "The number of used tokens."),
                   ("token_usage", "The token usage."),
                   ("gen_throughput", "The generation throughput (token/s)."),
                   ("num_queue_reqs", "The number of requests in the waiting queue."),
                   ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
                   ("num_running_reqs_offline_batch", "The number of running low-priority offline batch requests(label is 'batch')."),
                   ("cache_hit_rate", "The prefix cache hit rate."),
                   ("spec_accept_length", "The average acceptance length of speculative decoding."),
                   ("num_retracted_reqs", "The number of retracted requests."),
                   ("num_paused_reqs", "The number of paused requests by async weight sync.")):
        g[n] = Gauge("sglang:" + n, doc, SL, multiprocess_mode="max", registry=None)
    TL = ["model_name"]
    prompt = Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", TL, registry=None)
    gen = Counter("sglang:generation_tokens_total", "Number of generation tokens processed.", TL, registry=None)
    cached = Counter("sglang:cached_tokens_total", "Number of cached prompt tokens.", TL, registry=None)
    nreq = Counter("sglang:num_requests_total", "Number of requests processed.", TL, registry=None)
    nso = Counter("sglang:num_so_requests_total", "Number of structured output requests processed.", TL, registry=None)
    naborted = Counter("sglang:num_aborted_requests_total", "Number of requests aborted.", TL, registry=None)
    ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TL, buckets=SGL_TTFT, registry=None)
    itl = Histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", TL, buckets=SGL_ITL, registry=None)
    e2e = Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", TL, buckets=SGL_E2E, registry=None)
    for r in ranks:
        lv = [model, "unified", r["tp_rank"], "0"] + ([r["dp_rank"]] if len(ranks) > 1 else [])
        for k, v in r["gauges"].items():
            g[k].labels(*lv).set(v)
    prompt.labels(model).inc(5000000)
    cached.labels(model).inc(3125000)
    gen.labels(model).inc(1200000)
    nreq.labels(model).inc(4100)
    nso.labels(model).inc(0)
    naborted.labels(model).inc(3)
    observe(ttft.labels(model), [(0.0625, 100), (0.3125, 20), (1.5, 5)])
    observe(itl.labels(model), [(0.0078125, 100000), (0.03125, 2000)])
    observe(e2e.labels(model), [(3.0, 4000), (30.0, 100)])
    class SortedFiles(multiprocess.MultiProcessCollector):
        """The real collector globs its .db files in directory order;
        sorted, the page is the same on every run."""

        def collect(self):
            import glob
            return self.merge(sorted(glob.glob(os.path.join(self._path, "*.db"))), accumulate=True)

    reg = CollectorRegistry()
    SortedFiles(reg, path=d)
    return generate_latest(reg)


SGL_RANK0 = dict(tp_rank="0", dp_rank="0", gauges=dict(
    num_running_reqs=24, num_used_tokens=94208, token_usage=0.71875, gen_throughput=1412.5, num_queue_reqs=6,
    num_grammar_queue_reqs=0, num_running_reqs_offline_batch=0, cache_hit_rate=0.5625, spec_accept_length=0,
    num_retracted_reqs=2, num_paused_reqs=0))
SGL_RANK4 = dict(tp_rank="4", dp_rank="1", gauges=dict(
    num_running_reqs=16, num_used_tokens=40960, token_usage=0.3125, gen_throughput=998.0, num_queue_reqs=0,
    num_grammar_queue_reqs=0, num_running_reqs_offline_batch=0, cache_hit_rate=0.4375, spec_accept_length=0,
    num_retracted_reqs=0, num_paused_reqs=0))


# ---------------------------------------------------------------------------
# SGLang as it exports today (sglang/srt/observability/metrics_collector.py,
# SchedulerMetricsCollector.init_new and TokenizerMetricsCollector).
# Scheduler series carry model_name, engine_type, tp_rank, pp_rank,
# moe_ep_rank, then priority="" with --enable-priority-scheduling (the total;
# one more series per priority value) and dp_rank when data-parallel.
# With --enable-metrics-for-all-schedulers every TP rank writes the same
# scheduler state under its own tp_rank. sglang:num_retracted_requests_total
# is a counter; tokenizer series carry is_streaming or cache_source.

# The engine process's pid, fixed so that pages are reproducible.
ENGINE_PID = 4242

SGL_E2E_NOW = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400]


def sglang_now_page(engines, name, tp_ranks=1, priority=False, lora=None):
    """engines: list of dicts (dp_rank or None, tp_rank of the first
    attention-TP rank, gauges, by_priority, retracted)."""
    from prometheus_client import multiprocess, values
    d = os.path.join(MULTIPROC_DIR, name)
    os.makedirs(d)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = d
    values.ValueClass = values.MultiProcessValue(lambda: ENGINE_PID)  # a fixed pid: gauges in mode "all" carry it
    model = LLAMA
    SL = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
    if priority:
        SL.append("priority")
    if engines[0]["dp_rank"] is not None:
        SL.append("dp_rank")
    docs = (("num_running_reqs", "The number of running requests."),
            ("num_queue_reqs", "The number of requests in the waiting queue."),
            ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
            ("gen_throughput", "The generation throughput (token/s)."),
            ("cache_hit_rate", "The prefix cache hit rate."),
            ("token_usage", "The token usage."),
            ("full_token_usage", "The token usage for full attention layers."),
            ("num_used_tokens", "The number of used tokens."))
    if lora is not None:  # --enable-lora: (adapters in the running batch, max_loras_per_batch)
        docs += (("lora_pool_slots_used", "Number of LoRA adapter slots currently occupied in GPU memory."),
                 ("lora_pool_slots_total", "Total number of LoRA adapter slots available (max_loras_per_batch)."),
                 ("lora_pool_utilization", "LoRA pool utilization ratio (used/total). 1.0 means pool is full."))
    g = {n: Gauge("sglang:" + n, doc, SL, multiprocess_mode="max", registry=None) for n, doc in docs}  # "mostrecent" upstream; see sglang_page
    retracted_gauge = Gauge("sglang:num_retracted_reqs", "The number of retracted requests.", SL, registry=None)
    retracted = Counter("sglang:num_retracted_requests_total", "Total number of retracted requests.", SL, registry=None)
    TL = ["model_name"]
    prompt = Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", TL + ["is_streaming"], registry=None)
    gen = Counter("sglang:generation_tokens_total", "Number of generation tokens processed.", TL + ["is_streaming"], registry=None)
    cached = Counter("sglang:cached_tokens_total", "Number of cached prompt tokens by source (device/host/storage).",
                     TL + ["cache_source"], registry=None)
    nreq = Counter("sglang:num_requests_total", "Number of requests processed.", TL + ["is_streaming"], registry=None)
    ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                     TL + ["is_streaming"], buckets=SGL_TTFT, registry=None)
    e2e = Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                    TL + ["is_streaming"], buckets=SGL_E2E_NOW, registry=None)
    for e in engines:
        for k in range(tp_ranks):
            tp = str(int(e["tp_rank"]) + k)
            base = {"model_name": model, "engine_type": "unified", "tp_rank": tp, "pp_rank": "0", "moe_ep_rank": "0"}
            if priority:
                base["priority"] = ""
            if e["dp_rank"] is not None:
                base["dp_rank"] = e["dp_rank"]
            for n, v in e["gauges"].items():
                g[n].labels(**base).set(v)
                if priority and n in e.get("by_priority", {}):
                    for prio, pv in e["by_priority"][n].items():
                        g[n].labels(**{**base, "priority": prio}).set(pv)
            if lora is not None:
                used, total = lora
                g["lora_pool_slots_used"].labels(**base).set(used)
                g["lora_pool_slots_total"].labels(**base).set(total)
                g["lora_pool_utilization"].labels(**base).set(used / total)
            retracted_gauge.labels(**base).set(0)
            retracted.labels(**base).inc(e["retracted"])
    prompt.labels(model, "true").inc(4000000)
    prompt.labels(model, "false").inc(1000000)
    gen.labels(model, "true").inc(1000000)
    gen.labels(model, "false").inc(200000)
    cached.labels(model, "device").inc(3000000)
    cached.labels(model, "host").inc(125000)
    nreq.labels(model, "true").inc(4000)
    nreq.labels(model, "false").inc(100)
    observe(ttft.labels(model, "true"), [(0.0625, 90), (0.3125, 20), (1.5, 5)])
    observe(ttft.labels(model, "false"), [(0.0625, 10)])
    observe(e2e.labels(model, "true"), [(3.0, 3900), (30.0, 100)])
    observe(e2e.labels(model, "false"), [(3.0, 100)])

    class SortedFiles(multiprocess.MultiProcessCollector):
        def collect(self):
            import glob
            return self.merge(sorted(glob.glob(os.path.join(self._path, "*.db"))), accumulate=True)

    reg = CollectorRegistry()
    SortedFiles(reg, path=d)
    return generate_latest(reg)


SGL_NOW_E0 = dict(dp_rank=None, tp_rank="0", retracted=5, gauges=dict(
    num_running_reqs=24, num_queue_reqs=6, num_grammar_queue_reqs=0, gen_throughput=1412.5, cache_hit_rate=0.5625,
    token_usage=0.71875, full_token_usage=0.71875, num_used_tokens=94208),
    by_priority=dict(num_running_reqs={"0": 20, "1": 4}, num_queue_reqs={"0": 2, "1": 4}))
SGL_NOW_DP0 = dict(SGL_NOW_E0, dp_rank="0")
SGL_NOW_DP1 = dict(dp_rank="1", tp_rank="4", retracted=3, gauges=dict(
    num_running_reqs=16, num_queue_reqs=1, num_grammar_queue_reqs=0, gen_throughput=998.0, cache_hit_rate=0.4375,
    token_usage=0.9375, full_token_usage=0.9375, num_used_tokens=122880),
    by_priority=dict(num_running_reqs={"0": 16}, num_queue_reqs={"1": 1}))


# ---------------------------------------------------------------------------
# trtllm-serve as it exports today (tensorrt_llm/serve/openai_server.py,
# tensorrt_llm/metrics/collector.py). Prometheus is served at
# /prometheus/metrics, only with return_perf_metrics, from a multiprocess
# registry (gauges get a pid label), under labels model_name="undefined",
# engine_type="undefined"; /metrics answers JSON iteration stats. Queue,
# running, KV and block counters come from iteration stats
# (enable_iter_perf_stats); per-request series (TTFT, prompt tokens,
# cached prompt tokens) from finished requests.

TRT_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
            80.0, 160.0, 640.0, 2560.0]


def trtllm_now_page(name, iter_stats=True):
    from prometheus_client import multiprocess, values
    d = os.path.join(MULTIPROC_DIR, name)
    os.makedirs(d)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = d
    values.ValueClass = values.MultiProcessValue(lambda: ENGINE_PID)  # a fixed pid: gauges in mode "all" carry it
    labels = {"model_name": "undefined", "engine_type": "undefined"}
    L = list(labels)
    P = "trtllm_"
    Counter(P + "request_success_total", "Count of successfully processed requests.", L + ["finished_reason"],
            registry=None).labels(**labels, finished_reason="stop").inc(812)
    observe(Histogram(P + "e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", L,
                      buckets=REQ_LATENCY_BUCKETS, registry=None).labels(**labels), [(3.5, 812)])
    observe(Histogram(P + "time_to_first_token_seconds", "Histogram of time to first token in seconds.", L,
                      buckets=TRT_TTFT, registry=None).labels(**labels), [(0.046875, 700), (0.1875, 100), (1.25, 12)])
    observe(Histogram(P + "request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", L,
                      buckets=REQ_LATENCY_BUCKETS, registry=None).labels(**labels), [(0.0625, 812)])
    Counter(P + "prompt_tokens_total", "Cumulative number of prompt (input) tokens processed.", L,
            registry=None).labels(**labels).inc(1600000)
    Counter(P + "generation_tokens_total", "Cumulative number of generation (output) tokens produced.", L,
            registry=None).labels(**labels).inc(162400)
    Counter(P + "prompt_cached_tokens_total",
            "Process-lifetime total prompt tokens served from KV cache. Resets only when the serving process "
            "restarts, not when the KV cache is flushed or evicted.", L, registry=None).labels(**labels).inc(1200000)
    if iter_stats:
        Gauge(P + "kv_cache_hit_rate", "KV cache hit rate", L, registry=None).labels(**labels).set(0.75)
        Counter(P + "kv_cache_reused_blocks", "Cumulative number of KV cache blocks reused (cache hits)", L,
                registry=None).labels(**labels).inc(37500)
        Counter(P + "kv_cache_missed_blocks", "Cumulative number of KV cache blocks missed (cache misses)", L,
                registry=None).labels(**labels).inc(12500)
        Gauge(P + "kv_cache_utilization", "KV cache utilization", L, registry=None).labels(**labels).set(0.25)
        Gauge(P + "num_requests_running", "Number of active requests", L, registry=None).labels(**labels).set(8)
        Gauge(P + "num_requests_waiting", "Number of queued requests", L, registry=None).labels(**labels).set(1)
        Counter(P + "num_requests_completed_total", "Total number of completed requests across iterations", L,
                registry=None).labels(**labels).inc(812)
        Gauge(P + "kv_cache_max_blocks", "Maximum number of KV cache blocks", L, registry=None).labels(**labels).set(8192)
        Gauge(P + "kv_cache_used_blocks", "Number of used KV cache blocks", L, registry=None).labels(**labels).set(2048)
        Gauge(P + "kv_cache_free_blocks", "Number of free KV cache blocks", L, registry=None).labels(**labels).set(6144)

    class SortedFiles(multiprocess.MultiProcessCollector):
        def collect(self):
            import glob
            return self.merge(sorted(glob.glob(os.path.join(self._path, "*.db"))), accumulate=True)

    reg = CollectorRegistry()
    SortedFiles(reg, path=d)
    return generate_latest(reg)


# What trtllm-serve's /metrics answers: a JSON list of iteration stats.
TRT_JSON = ('[{"cpuMemUsage":1873215488,"gpuMemUsage":71892516864,"inflightBatchingStats":{"avgNumDecodedTokensPerIter":1.0,'
            '"microBatchId":0,"numContextRequests":0,"numCtxTokens":0,"numGenRequests":8,"numPausedRequests":0,'
            '"numScheduledRequests":8},"iter":5120,"iterLatencyMS":14.25,"kvCacheStats":{"allocNewBlocks":0,'
            '"allocTotalBlocks":2048,"cacheHitRate":0.75,"freeNumBlocks":6144,"maxNumBlocks":8192,"missedBlocks":12500,'
            '"reusedBlocks":37500,"tokensPerBlock":32,"usedNumBlocks":2048},"maxBatchSizeRuntime":256,'
            '"maxBatchSizeStatic":256,"maxNumActiveRequests":256,"maxNumTokensRuntime":8192,"newActiveRequestsQueueLatencyMS":0.0,'
            '"numActiveRequests":8,"numCompletedRequests":0,"numNewActiveRequests":0,"numQueuedRequests":1,'
            '"pinnedMemUsage":0,"timestamp":"12-01-2026 14:30:05"}]')


# ---------------------------------------------------------------------------
# TensorRT-LLM trtllm-serve (tensorrt_llm/metrics/collector.py): prefix
# trtllm_, labels model_name, engine_type; served from the default registry.

def trtllm_page():
    reg = CollectorRegistry(auto_describe=True)
    reg.register(FixedRuntimeCollector())
    L = ["engine_type", "model_name"]
    lv = ("trtllm", LLAMA)
    Counter("trtllm_request_success_total", "Count of successfully processed requests.", L + ["finished_reason"], registry=reg).labels(*lv, "stop").inc(812)
    h = Histogram("trtllm_e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", L,
                  buckets=REQ_LATENCY_BUCKETS, registry=reg)
    observe(h.labels(*lv), [(3.5, 812)])
    h = Histogram("trtllm_time_to_first_token_seconds", "Histogram of time to first token in seconds.", L,
                  buckets=TTFT_BUCKETS_V1, registry=reg)
    observe(h.labels(*lv), [(0.046875, 700), (0.1875, 100), (1.25, 12)])
    h = Histogram("trtllm_time_per_output_token_seconds", "Histogram of time per output token in seconds.", L,
                  buckets=ITL_BUCKETS, registry=reg)
    observe(h.labels(*lv), [(0.015625, 812)])
    h = Histogram("trtllm_request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", L,
                  buckets=REQ_LATENCY_BUCKETS, registry=reg)
    observe(h.labels(*lv), [(0.0625, 812)])
    Gauge("trtllm_num_requests_running", "Number of requests currently running.", L, registry=reg).labels(*lv).set(8)
    Gauge("trtllm_num_requests_waiting", "Number of requests waiting to be scheduled.", L, registry=reg).labels(*lv).set(1)
    Gauge("trtllm_kv_cache_hit_rate", "KV cache hit rate", L, registry=reg).labels(*lv).set(0.75)
    Gauge("trtllm_kv_cache_utilization", "KV cache utilization", L, registry=reg).labels(*lv).set(0.25)
    return generate_latest(reg)


# ---------------------------------------------------------------------------
# TGI (router/src/server.rs, metrics-exporter-prometheus): no HELP lines,
# families sorted by name, counters without _total, integers printed bare.

def fmt(v):
    if v == float("inf"):
        return "+Inf"
    if float(v).is_integer():
        return str(int(v))
    return repr(float(v))


def tgi_page():
    out = []
    dur_buckets, v = [], 0.0001
    for _ in range(35):
        v *= 1.5
        dur_buckets.append(v)
    max_input, max_total, max_batch = 4095, 4096, 128
    input_buckets = [(max_input / 100.0) * (i + 1) for i in range(100)]
    gen_buckets = [(max_total / 100.0) * (i + 1) for i in range(100)]
    batch_buckets = [float(i + 1) for i in range(max_batch)]

    def hist(name, buckets, obs, labels=""):
        out.append(f"# TYPE {name} histogram")
        lab = labels + "," if labels else ""
        for b in buckets:
            out.append(f'{name}_bucket{{{lab}le="{fmt(b)}"}} {sum(n for x, n in obs if x <= b)}')
        out.append(f'{name}_bucket{{{lab}le="+Inf"}} {sum(n for _, n in obs)}')
        br = "{" + labels + "}" if labels else ""
        out.append(f"{name}_sum{br} {fmt(sum(x * n for x, n in obs))}")
        out.append(f"{name}_count{br} {sum(n for _, n in obs)}")
        out.append("")

    def scalar(kind, name, v, labels=""):
        out.append(f"# TYPE {name} {kind}")
        br = "{" + labels + "}" if labels else ""
        out.append(f"{name}{br} {fmt(v)}")
        out.append("")

    scalar("gauge", "tgi_batch_current_max_tokens", 52480)
    scalar("gauge", "tgi_batch_current_size", 16)
    hist("tgi_batch_decode_duration", dur_buckets, [(0.0005, 9000)], 'method="decode"')
    hist("tgi_batch_filter_duration", dur_buckets, [(0.00025, 400)], 'method="decode"')
    hist("tgi_batch_forward_duration", dur_buckets, [(0.02, 9000)], 'method="decode"')
    out.append("# TYPE tgi_batch_inference_count counter")
    out.append('tgi_batch_inference_count{method="decode"} 9000')
    out.append('tgi_batch_inference_count{method="prefill"} 410')
    out.append("")
    hist("tgi_batch_inference_duration", dur_buckets, [(0.025, 9000)], 'method="decode"')
    out.append("# TYPE tgi_batch_inference_success counter")
    out.append('tgi_batch_inference_success{method="decode"} 9000')
    out.append('tgi_batch_inference_success{method="prefill"} 410')
    out.append("")
    hist("tgi_batch_next_size", batch_buckets, [(4.0, 410)])
    scalar("gauge", "tgi_queue_size", 4)
    scalar("counter", "tgi_request_count", 415)
    hist("tgi_request_duration", dur_buckets, [(2.5, 410)])
    hist("tgi_request_generated_tokens", gen_buckets, [(200.0, 410)])
    hist("tgi_request_inference_duration", dur_buckets, [(2.25, 410)])
    hist("tgi_request_input_length", input_buckets, [(900.0, 410)])
    hist("tgi_request_max_new_tokens", gen_buckets, [(1024.0, 410)])
    hist("tgi_request_mean_time_per_token_duration", dur_buckets, [(0.011, 410)])
    hist("tgi_request_queue_duration", dur_buckets, [(0.125, 410)])
    scalar("counter", "tgi_request_success", 410)
    hist("tgi_request_validation_duration", dur_buckets, [(0.0004, 415)])
    return "\n".join(out)


# ---------------------------------------------------------------------------
# Malformed pages, small and hand-shaped.

def small_vllm(waiting="3.0", running="12.0", kv="0.4375"):
    m = f'{{engine="0",model_name="{LLAMA}"}}'
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{m} {running}\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{m} {waiting}\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{m} {kv}\n"
    )


def main():
    v1 = vllm_page([LLAMA_E0])
    write("vllm_v1.txt", v1)
    write("vllm_v1.openmetrics.txt", vllm_page([LLAMA_E0], openmetrics=True))
    write("vllm_v1_two_engines.txt", vllm_page([LLAMA_E0, LLAMA_E1]))
    write("vllm_v1_two_models.txt", vllm_page([LLAMA_E0, QWEN_E0]))
    write("vllm_v1_early.txt", vllm_v1_early_page())
    write("vllm_v0.txt", vllm_v0_page())
    # V0 without --enable-prefix-caching (its default) reports a hit rate of -1.
    write("vllm_v0_no_prefix_caching.txt", vllm_v0_page(hit_rate=-1))
    write("sglang.txt", sglang_page([SGL_RANK0], "single"))
    write("sglang_dp_attention.txt", sglang_page([SGL_RANK0, SGL_RANK4], "dp"))
    write("trtllm.txt", trtllm_page())
    write("tgi.txt", tgi_page())
    # Today's formats: priority scheduling, metrics from every TP rank, DP.
    write("sglang_priority.txt", sglang_now_page([SGL_NOW_E0], "now-priority", priority=True))
    write("sglang_all_schedulers.txt", sglang_now_page([SGL_NOW_E0], "now-all", tp_ranks=4))
    write("sglang_dp.txt", sglang_now_page([SGL_NOW_DP0, SGL_NOW_DP1], "now-dp"))
    write("sglang_dp_priority_all_schedulers.txt",
          sglang_now_page([SGL_NOW_DP0, SGL_NOW_DP1], "now-dp-prio-all", tp_ranks=4, priority=True))
    write("trtllm_prometheus.txt", trtllm_now_page("trt-now"))
    write("trtllm_prometheus_no_iter_stats.txt", trtllm_now_page("trt-now-noiter", iter_stats=False))
    write("trtllm_metrics.json", TRT_JSON)

    # LoRA: vLLM's adapter gauge over time; an idle engine (only the empty
    # series); more adapters in flight than --max-loras (requests wait for a
    # slot, which today's running list does not tell apart); SGLang's
    # adapter-slot counts.
    write("vllm_v1_lora.txt", vllm_lora_page(LORA_HISTORY))
    write("vllm_v1_lora.openmetrics.txt", vllm_lora_page(LORA_HISTORY, openmetrics=True))
    write("vllm_v1_lora_idle.txt", vllm_lora_page([("4", "", "", LORA_T0)]))
    write("vllm_v1_lora_overfull.txt", vllm_lora_page([
        ("2", "a,b", "a,b", LORA_T0),
        ("2", "a,b,c,d,e", "a,b,c,d,e", LORA_T0 + 5.0),
    ]))
    write("sglang_lora.txt", sglang_now_page([SGL_NOW_E0], "now-lora", lora=(3, 8)))
    # Shaped by hand: what no vLLM prints but a proxy or an older build
    # might: no max_lora label, and spaces after the commas (the Gateway
    # API Inference Extension's protocol document shows "a, b").
    write("lora_no_max.txt", small_vllm() + (
        "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
        "# TYPE vllm:lora_requests_info gauge\n"
        f'vllm:lora_requests_info{{running_lora_adapters="sql-lora, chat-lora",waiting_lora_adapters=""}} {LORA_T0}\n'
    ))
    # Bad times: NaN, negative, +Inf. Such series are skipped, not fatal.
    write("lora_bad_values.txt", small_vllm() + (
        "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
        "# TYPE vllm:lora_requests_info gauge\n"
        f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="x",waiting_lora_adapters="x"}} NaN\n'
        f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="y",waiting_lora_adapters="y"}} +Inf\n'
        f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="z",waiting_lora_adapters="z"}} -1.0\n'
        f'vllm:lora_requests_info{{max_lora="four",running_lora_adapters="ok",waiting_lora_adapters=""}} {LORA_T0}\n'
    ))

    # An HTML error page served with status 200 by a proxy in front of the engine.
    write("garbage.txt",
          "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
          "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.25.3</center>\r\n</body>\r\n</html>\r\n")
    # The V1 page cut off mid-series, as by a connection reset.
    cut = v1.index(b"vllm:kv_cache_usage_perc{") + len(b"vllm:kv_cache_usage_perc{engine=\"0\",mod")
    write("truncated.txt", v1[:cut])
    om = vllm_page([LLAMA_E0], openmetrics=True)
    # OpenMetrics cut at a line boundary: only the missing "# EOF" tells.
    cut = om.index(b"# HELP vllm:prefix_cache_queries")
    write("truncated.openmetrics.txt", om[:cut])
    write("nan_kv.txt", small_vllm(kv="NaN"))
    write("inf_queue.txt", small_vllm(waiting="+Inf"))
    write("negative.txt", small_vllm(running="-1.0"))
    write("kv_over_one.txt", small_vllm(kv="1.25"))
    # Float error in the engine's used/total division is tolerated (clamped to 1).
    write("kv_rounding.txt", small_vllm(kv="1.0000000000000002"))
    write("empty.txt", "")


if __name__ == "__main__":
    sys.exit(main())
