pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  weights {
    min    = 2
    max    = 4
    levels = 4
  }
}

pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  weights {
    levels = 0
  }
}
