pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }

  kubernetes {
    service = "vllm"
    port    = ""
  }

  kubernetes {
    namespace     = "llm"
    service       = "vllm"
    port          = 70000
    node_locality = "yes"
  }

  dns {
    type = "MX"
  }

  dns {
    name     = "vllm.internal"
    type     = "A"
    resolver = "dns.internal:53"
    refresh  = "100ms"
  }

  dns {
    name     = "vllm.service.consul"
    refresh  = "30s"
    keep_for = "10s"
  }
}
