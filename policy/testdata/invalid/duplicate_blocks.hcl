xds { address = "127.0.0.1:18000" }
xds { address = "127.0.0.1:18001" }
admin { address = "127.0.0.1:18000" }

pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  hash {
    key { header = "x-tenant-id" }
  }
  static {
    endpoints = ["127.0.0.1:8001"]
  }
  static {
    endpoints = ["127.0.0.1:8002"]
  }
}
