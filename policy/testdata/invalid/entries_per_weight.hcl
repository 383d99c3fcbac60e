pool "chat" {
  port = 10000
  hash {
    algorithm          = "maglev"
    entries_per_weight = 256
    key { header = "x-session-id" }
  }
}

pool "code" {
  port = 10001
  hash {
    entries_per_weight = 256
    max_ring_size      = 4096
    key { header = "x-session-id" }
  }
}

pool "embed" {
  port = 10002
  hash {
    entries_per_weight = 1048576
    key { header = "x-session-id" }
  }
  static {
    endpoints = ["10.0.0.1:8000", "10.0.0.2:8000"]
    endpoint "10.0.0.3:8000" { weight = 8 }
  }
}

pool "rerank" {
  port = 10003
  hash {
    entries_per_weight = 65536
    key { header = "x-session-id" }
  }
  static {
    endpoints = ["10.0.1.1:8000", "10.0.1.2:8000", "10.0.1.3:8000", "10.0.1.4:8000"]
  }
  metrics {}
  weights { max = 64 }
}

pool "mesh" {
  port = 10004
  hash {
    entries_per_weight = 1024
    key { header = "x-session-id" }
  }
  mesh { eds_cluster_name = "outbound|8000||vllm.llm.svc.cluster.local" }
}

pool "zero" {
  port = 10005
  hash {
    entries_per_weight = 0
    key { header = "x-session-id" }
  }
}
