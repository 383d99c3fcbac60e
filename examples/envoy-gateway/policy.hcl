# kvxds behind Envoy Gateway: the gateway keeps its listeners, routes and
# clusters; the endpoints of HTTPRoute llm/vllm's first rule come from
# kvxds (EDS only).
xds   { address = "0.0.0.0:18000" }
admin { address = "0.0.0.0:19000" }

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

  mesh { eds_cluster_name = "httproute/llm/vllm/rule/0" }
}
