pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    engine = "custom"
    signal "kv_occupancy" {
      metric = "my_engine_kv_used_ratio"
    }
    signal "queue_depth" {
      metric = "my_engine_waiting"
    }
    signal "kv_occupancy" {
      metric = "my_engine_kv_free_ratio"
      scale  = -1
    }
  }
}
