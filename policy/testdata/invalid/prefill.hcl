pool "a" {
  port           = 10000
  load_balancing = "least_request"
  prefill {}
  static { endpoints = ["10.0.0.1:8000"] }
}

pool "b" {
  port           = 10001
  load_balancing = "least_request"
  prefill {
    pool   = "missing"
    header = "X-Prefiller"
  }
  prefill { pool = "c" }
}

pool "c" {
  port           = 10002
  load_balancing = "round_robin"
  prefill { pool = "c" }
}

pool "d" {
  port = 10003
  hash {
    key { header = "x-session-id" }
  }
  prefill {
    pool           = "c"
    header         = "x-envoy-upstream"
    min_body_bytes = -1
  }
}

pool "e" {
  port           = 10004
  load_balancing = "least_request"
  prefill { pool = "f" }
  static { endpoints = ["10.0.2.1:8000", "10.0.2.2:8000"] }
}

pool "f" {
  port = 10005
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = ["10.0.2.2:8000", "10.0.2.3:8000"] }
}

pool "g" {
  port           = 10006
  load_balancing = "least_request"
  prefill { pool = "e" }
}

pool "h" {
  port           = 10007
  load_balancing = "least_request"
  prefill { pool = "f" }
  mesh { eds_cluster_name = "outbound|8000||vllm-decode.llm.svc.cluster.local" }
}
