# Pools of the recipe tests: one per mesh, and the cases a recipe refuses.
xds { address = "0.0.0.0:18000" }

# Istio: Maglev on the session header, bounded load, mTLS kept.
pool "chat" {
  port = 10000
  hash {
    balance_factor = 150
    key { header = "x-session-id" }
    key { header = "x-tenant-id" }
  }
  mesh {
    eds_cluster_name = "outbound|8000||vllm.llm.svc.cluster.local"
    istio_mtls       = true
  }
}

# Istio with a ring hash.
pool "ring" {
  port = 10001
  hash {
    min_ring_size = 2048
    max_ring_size = 65536
    key { header = "x-session-id" }
  }
  mesh {
    eds_cluster_name = "outbound|8000||sglang.llm.svc.cluster.local"
    istio_mtls       = true
  }
}

# Envoy Gateway: an HTTPRoute's rule.
pool "gateway" {
  port = 10002
  hash {
    table_size = 131071
    key { header = "x-session-id" }
    key { json_field = "user" }
  }
  mesh { eds_cluster_name = "httproute/llm/vllm/rule/0" }
}

# A plain Envoy with a cluster of its own.
pool "edge" {
  port = 10003
  hash {
    balance_factor = 125
    key { header = "x-session-id" }
    key { cookie = "session" }
    key { prompt_prefix = 4096 }
  }
  mesh { eds_cluster_name = "vllm_backend" }
}

pool "plain" {
  port = 10004
  hash {
    key { header = "x-session-id" }
  }
}

pool "subset" {
  port = 10005
  hash {
    key { header = "x-session-id" }
  }
  mesh { eds_cluster_name = "outbound|8000|v1|vllm.llm.svc.cluster.local" }
}

pool "bodyfirst" {
  port = 10006
  hash {
    key { json_field = "user" }
  }
  mesh { eds_cluster_name = "outbound|8001||vllm.llm.svc.cluster.local" }
}

pool "ringgw" {
  port = 10007
  hash {
    algorithm = "ring_hash"
    key { header = "x-session-id" }
  }
  mesh { eds_cluster_name = "httproute/llm/ring/rule/0" }
}

pool "baseline" {
  port           = 10008
  load_balancing = "round_robin"
  mesh { eds_cluster_name = "baseline_backend" }
}
