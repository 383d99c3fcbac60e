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

# Only settings written in the file can conflict: the interval, left
# unset, would follow timeout and stale_after, but no interval is longer
# than this timeout and at most this stale_after.
pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    timeout     = "5s"
    stale_after = "4s"
  }
}

# No interval is that short.
pool "embed" {
  port = 10002
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    stale_after = "50ms"
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

pool "vision" {
  port = 10004
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    interval    = "1s"
    timeout     = "1s"
    stale_after = "500ms"
  }
}

# No interval is twice as long.
pool "audio" {
  port = 10005
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    timeout = "2562047h47m16.854775807s"
  }
}
