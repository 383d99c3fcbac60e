pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    key { header = "x-tenant-id" }
  }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"] }

  group "acme" {
    match {
      header = "X-Tenant-ID"
      values = ["acme"]
    }
    replicas = 2
  }
  group "big-two" {
    match {
      header = "x-tenant-id"
      values = ["globex", "initech"]
    }
    replicas  = 1
    exclusive = true
  }
}
