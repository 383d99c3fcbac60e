pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static {
    endpoints = ["vllm-0.inference.svc:8000", "10.0.0.1:8000"]
    endpoint "vllm-1.inference.svc:8000" {}
  }
}
