pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    interval = "50ms"
    timeout  = "10ms"
  }
}

pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    interval    = "2 seconds"
    timeout     = "-1s"
    stale_after = 10
  }
}
