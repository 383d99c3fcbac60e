pool "chat" {
  port = 10000
  hash {
    algorithm  = "ring_hash"
    table_size = 65537
    key { header = "x-session-id" }
  }
}

pool "code" {
  port = 10001
  hash {
    table_size    = 65537
    min_ring_size = 1024
    key { header = "x-session-id" }
  }
}

pool "embed" {
  port = 10002
  hash {
    algorithm     = "ring_hash"
    min_ring_size = 4096
    max_ring_size = 1024
    key { header = "x-session-id" }
  }
}

pool "rerank" {
  port = 10003
  hash {
    algorithm     = "ring_hash"
    max_ring_size = 16777216
    key { header = "x-session-id" }
  }
}
