# Endpoints served under a mesh's own cluster names (EDS only).
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000"] }
  mesh {
    eds_cluster_name = "outbound|8000||vllm.llm.svc.cluster.local"
    istio_mtls       = true
  }
}

pool "gateway" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  mesh { eds_cluster_name = "httproute/default/vllm/rule/0" }
}
