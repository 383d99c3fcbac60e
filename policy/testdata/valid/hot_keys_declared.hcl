# A pool its proxyless gRPC clients alone serve: no access logs, so the
# operator declares the tenant known to carry most requests.
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    key { header = "x-tenant-id" }
    hot_keys {
      max = 4
      declared {
        header = "x-tenant-id"
        values = ["globex", "acme"]
      }
    }
  }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"] }
}
