pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    engine = "vllm"
    signal "kv_occupancy" {
      metric = "vllm:kv_cache_usage_perc"
    }
  }
}

