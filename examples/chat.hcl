# The smallest useful kvxds policy: one pool of two replicas, hashed on the
# session header, falling back to the tenant header.
#
#   kvxds serve --policy examples/chat.hcl
#   kvxds bootstrap --node envoy-1 > envoy.yaml && envoy -c envoy.yaml
#   curl -H 'x-session-id: conv-42' localhost:10000/v1/chat/completions ...

xds   { address = "127.0.0.1:18000" }
admin { address = "127.0.0.1:19000" }

pool "chat" {
  port = 10000            # Envoy listener port; proxyless gRPC clients resolve xds:///chat

  hash {
    algorithm      = "maglev"   # or "ring_hash"
    table_size     = 65537      # maglev only, must be prime
    balance_factor = 150        # bounded load in percent (Envoy hash_balance_factor); 0 = off
    keyless        = "round_robin" # requests with neither header: or "least_request", "random"
    key { header = "x-session-id" }   # keys are tried in order; the first one present wins
    key { header = "x-tenant-id" }
  }

  static {
    endpoints = ["127.0.0.1:8001", "127.0.0.1:8002"]
  }
}
