pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    engine = "custom"
    signal "ttft" {
      metric = "my_engine_ttft_seconds"
    }
    signal "prefix_hit_rate" {
      metric = "my_engine_prefix_hit_rate"
    }
  }
}

pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    engine = "custom"
  }
}

# Signal blocks make the engine custom.
pool "embed" {
  port = 10002
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    signal "ttft" {
      metric = "my_engine_ttft_seconds"
    }
  }
}
