# An Envoy configured by hand (or by another control plane) that takes
# one cluster's endpoints from kvxds (EDS only).
xds   { address = "127.0.0.1:18000" }
admin { address = "127.0.0.1:19000" }

pool "chat" {
  port = 10000
  hash {
    balance_factor = 150
    key { header = "x-session-id" }
    key { header = "x-tenant-id" }
  }

  static {
    endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]
  }

  mesh { eds_cluster_name = "vllm" }
}
