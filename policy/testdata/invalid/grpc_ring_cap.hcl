pool "a" {
  port = 10000
  hash {
    grpc_ring_cap = 32
    key { header = "x-session-id" }
  }
}

pool "b" {
  port = 10001
  hash {
    grpc_ring_cap = "big"
    key { header = "x-session-id" }
  }
}
