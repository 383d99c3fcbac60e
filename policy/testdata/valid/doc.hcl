xds   { address = "127.0.0.1:18000" }
admin { address = "127.0.0.1:19000" }

pool "chat" {
  port          = 10000   # Envoy listener; gRPC clients dial xds:///chat
  route_timeout = "0s"    # no timeout: generations stream for minutes
  hash {
    algorithm      = "maglev" # or "ring_hash" (min_ring_size, max_ring_size)
    table_size     = 65537    # prime
    balance_factor = 150      # bounded load, percent; 0 = off
    keyless        = "round_robin" # requests with no key; or "least_request", "random"
    grpc_ring_cap  = 4096     # gRPC clients' ring size cap, if raised on them
    key { header = "x-session-id" } # tried in order; first present wins
    key { cookie = "session" }
  }
  static {
    endpoints = ["127.0.0.1:8001"]
    endpoint "127.0.0.1:8002" {
      weight   = 3           # 1..128
      hash_key = "replica-b" # stable ring identity; default host:port
    }
  }
  metrics {                  # scrape each replica; omit for static weights
    engine = "vllm"          # or "sglang", "tgi", "trtllm", "custom"
    model  = "meta-llama/Llama-3.1-8B-Instruct" # only this model's series
  }
  escape  { max_kv_occupancy = 0.95 } # when a replica leaves the hash table
  weights { max = 8 }                  # weight multiplier from free capacity
}
