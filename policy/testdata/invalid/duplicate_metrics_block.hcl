pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    engine = "vllm"
  }
  metrics {
    engine = "sglang"
    port   = 0
  }
  escape {}
  escape {}
  weights {}
  weights {
    max = 1000
  }
}
