pool "a" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  mesh {
    istio_mtls = "yes"
  }
}

pool "b" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  mesh { eds_cluster_name = "outbound|8000||vllm.llm.svc.cluster.local" }
  mesh { eds_cluster_name = "other" }
}

pool "c" {
  port = 10002
  hash {
    key { header = "x-session-id" }
  }
  mesh {
    eds_cluster_name = "outbound|8000||vllm.llm.svc.cluster.local"
    tls_mode         = "istio"
  }
}

pool "d" {
  port = 10003
  hash {
    key { header = "x-session-id" }
  }
  mesh { eds_cluster_name = "e" }
}

pool "e" {
  port = 10004
  hash {
    key { header = "x-session-id" }
  }
  mesh { eds_cluster_name = "vllm cluster" }
}
