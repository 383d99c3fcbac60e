pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }

  kubernetes {
    namespace     = "llm"
    service       = "vllm"
    port          = "http"
    node_locality = true
  }

  kubernetes {
    namespace  = "llm-canary"
    service    = "vllm-canary"
    port       = 8000
    kubeconfig = "/etc/kvxds/kubeconfig"
  }

  dns {
    name     = "vllm.service.consul"
    resolver = "127.0.0.1:8600"
    refresh  = "5s"
    keep_for = "2m"
  }

  dns {
    name = "vllm.internal."
    type = "a"
    port = 8000
  }

  static { endpoints = ["10.0.0.9:8000"] }
}
