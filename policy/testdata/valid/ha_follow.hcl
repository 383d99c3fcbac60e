# A second kvxds outside Kubernetes serving the first one's decisions.
ha { follow = "http://10.0.0.5:19000" }

pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = ["10.0.0.10:8000", "10.0.0.11:8000"] }
  metrics { engine = "vllm" }
}
