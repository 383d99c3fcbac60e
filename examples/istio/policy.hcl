# kvxds inside an Istio mesh: istiod keeps every resource but the
# endpoints of vllm.llm's port 8000, which kvxds serves (EDS only).
xds   { address = "0.0.0.0:18000" }
admin { address = "0.0.0.0:19000" }

pool "chat" {
  port = 10000 # kvxds's own listener, for data planes configured by kvxds alone
  hash {
    balance_factor = 150
    key { header = "x-session-id" }
  }

  kubernetes {
    namespace = "llm"
    service   = "vllm"
    port      = "http"
  }

  metrics { engine = "vllm" }

  mesh {
    eds_cluster_name = "outbound|8000||vllm.llm.svc.cluster.local"
    istio_mtls       = true # the replicas have sidecars: keep Istio's mTLS
  }
}
