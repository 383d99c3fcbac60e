# Load-aware weights from vLLM metrics.
pool "chat" {
  port = 10000

  hash {
    key { header = "x-session-id" }
  }

  metrics {
    engine      = "vllm"
    interval    = "500ms"
    timeout     = "250ms"
    stale_after = "5s"
    path        = "/stats/prometheus"
    port        = 8001
    scheme      = "https"
    model       = "meta-llama/Llama-3.1-8B-Instruct"
  }

  escape {
    max_queue_depth        = 16
    max_kv_occupancy       = 0.95 # resume_kv_occupancy defaults to 0.85
    max_preemption_rate    = 0.5
    resume_queue_depth     = 10
    hold                   = "1m"
    relative_queue         = 1.5
    relative_kv_margin     = 0 # the KV signal alone, as before
    max_saturated_fraction = 0.25
  }

  weights {
    min          = 2
    max          = 8
    smoothing    = 1
    hysteresis   = 0
    min_interval = "0s"
  }
}

# An empty metrics block scrapes vLLM with every default.
pool "defaults" {
  port = 10001

  hash {
    key { header = "x-session-id" }
  }

  metrics {}
}

# Derived defaults: stale_after from interval, resume values from the
# maxima, levels from a narrow min..max.
pool "sglang" {
  port = 10002

  hash {
    key { header = "x-session-id" }
  }

  metrics {
    engine   = "sglang"
    interval = "3s"
    timeout  = "" # the default, as if omitted
  }

  escape {
    max_queue_depth     = 5
    max_kv_occupancy    = 0.05
    resume_kv_occupancy = 0.01
    hold                = "0s"
  }

  weights {
    min = 3
    max = 4
  }
}

pool "tgi" {
  port = 10003

  hash {
    key { header = "x-session-id" }
  }

  metrics {
    engine = "tgi"
  }

  escape {
    max_kv_occupancy = 0.05
  }

  weights {
    max    = 128
    levels = 128
  }
}

pool "trtllm" {
  port = 10004

  hash {
    key { header = "x-session-id" }
  }

  metrics {
    engine      = "trtllm"
    interval    = "100ms"
    timeout     = "99ms"
    stale_after = "100ms"
  }
}
