pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    max_saturated_fraction = 1.5
  }
}

pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    max_saturated_fraction = -0.1
  }
}
