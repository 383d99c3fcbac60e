ha {
  follow = "10.0.0.5:19000"
  kubernetes {
    namespace      = "KVXDS"
    lease_duration = "10s"
  }
  kubernetes {
    namespace = "kvxds"
    lease     = "kvxds"
  }
}

ha {}

pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
}
