# Prefill/decode disaggregation: clients send to the decode pool "chat",
# balanced by load; Envoy names each request's prefill replica, picked by
# the prefill pool's keys, in the header llm-d's routing sidecar reads.
pool "chat" {
  port           = 10000
  load_balancing = "least_request"
  prefill {
    pool           = "chat-prefill"
    min_body_bytes = 2048 # shorter prompts prefill on the decode replica
  }
  static {
    endpoints = ["10.0.0.1:8000", "10.0.0.2:8000"]
  }
  metrics {}
}

pool "chat-prefill" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  static {
    endpoints = ["10.0.1.1:8000", "10.0.1.2:8000", "10.0.1.3:8000"]
  }
  metrics {}
}
