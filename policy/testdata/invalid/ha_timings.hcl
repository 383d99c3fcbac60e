ha {
  kubernetes {
    namespace      = "kvxds"
    lease          = "kvxds-"
    renew_deadline = "2s"
    retry_period   = "2s"
  }
}

pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
}
