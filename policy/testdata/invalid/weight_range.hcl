pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  weights {
    min = 8
    max = 4
  }
}

pool "embed" {
  port = 10002
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  weights {
    min = 0
    max = 256
  }
}

# relative is true or false.
pool "relative" {
  port = 10009
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  weights {
    relative = "yes"
  }
}
