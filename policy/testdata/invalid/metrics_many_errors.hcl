pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }

  metrics {
    engine      = "custom"
    interval    = "20ms"
    stale_after = "1s"
    model       = ""

    signal "kv_ocupancy" {
      metric = "engine-kv"
    }
    signal "ttft" {
      metric = "engine_ttft"
      labels = { "model-name" = "llama" }
    }
  }

  escape {
    max_kv_occupancy       = 1.2
    resume_queue_depth     = 0
    max_saturated_fraction = 2
  }

  weights {
    min        = 4
    max        = 2
    levels     = 8
    smoothing  = 0
    hysteresis = -1
  }
  weights {}
}

pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  escape {}
  metrics_port = 9000
}
