pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    interval = "2s"
    timeout  = "2s"
  }
}

# The default timeout, 1s, is not shorter than this interval.
pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    interval = "1s"
  }
}

pool "embed" {
  port = 10002
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    timeout = "5s"
  }
}

pool "rerank" {
  port = 10003
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    timeout     = "0s"
    stale_after = "1s"
  }
}
