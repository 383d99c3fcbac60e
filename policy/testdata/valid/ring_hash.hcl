# A ring_hash pool: what proxyless gRPC clients implement natively.
pool "embed" {
  port           = 10001
  listen_address = "127.0.0.1"
  route_timeout  = "10m"
  idle_timeout   = "1h"

  hash {
    algorithm     = "ring_hash"
    min_ring_size = 1024
    max_ring_size = 8388608
    keyless       = "least_request"
    key { cookie = "session" }
    key { query_parameter = "session_id" }
    key { header = "X-Session-ID" }
  }

  static {
    endpoints = ["[::1]:8001", "10.8.0.12:8001"]
  }
}
