# A custom engine: signal blocks say which metric carries each signal.
pool "custom" {
  port = 10000

  hash {
    key { header = "x-session-id" }
  }

  metrics {
    engine = "custom"
    port   = 9400
    model  = "llama"

    signal "kv_occupancy" {
      metric = "my_engine_kv_used_ratio"
      labels = { device = "gpu" }
    }
    signal "queue_depth" {
      metric = "my_engine:queue_length"
      scale  = 1
    }
    signal "preemptions" {
      metric = "my_engine_preemptions_total"
      labels = {}
    }
    signal "ttft" {
      metric = "my_engine_time_to_first_token_milliseconds" # histogram, without _bucket
      labels = { "stage" = "prefill", _replica = "a" }
      scale  = 0.001
    }
    signal "prefix_hit_rate" {
      metric = "my_engine_prefix_cache_hit_percent"
      scale  = 0.01
    }
  }
}
