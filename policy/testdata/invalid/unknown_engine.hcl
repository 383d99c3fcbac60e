pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    engine = "vLLM-v1"
  }
}

pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    engine = ["vllm"]
    scheme = "grpc"
    path   = "metrics"
  }
}
