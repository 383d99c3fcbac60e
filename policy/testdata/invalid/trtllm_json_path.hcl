pool "trt" {
  port = 10000

  hash {
    key { header = "x-session-id" }
  }

  metrics {
    engine = "trtllm"
    path   = "/metrics"
  }
}
