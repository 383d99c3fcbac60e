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

# The engine defaults to vllm.
pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    signal "queue_depth" {
      metric = "vllm:num_requests_waiting"
    }
  }
}
