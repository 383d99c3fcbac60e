pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    engine = "custom"
    signal "kv_cache_usage" {
      metric = "my_engine_kv_used_ratio"
    }
    signal "waiting" {
      metric = "my_engine_waiting"
    }
  }
}
