pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  weights {
    smoothing    = 0
    hysteresis   = 1.5
    min_interval = "soon"
  }
}
