# Three kvxds replicas in Kubernetes: one leader scrapes and decides, the
# others serve its decisions.
ha {
  kubernetes {
    namespace      = "kvxds"
    lease          = "kvxds-chat"
    lease_duration = "20s"
    renew_deadline = "12s"
    retry_period   = "3s"
  }
}

pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  kubernetes {
    namespace = "llm"
    service   = "vllm"
    port      = "http"
  }
  metrics { engine = "vllm" }
}
