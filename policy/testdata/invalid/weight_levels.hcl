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

# max, left unset, rises to fit levels, but not beyond 128.
pool "embed" {
  port = 10002
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  weights {
    min    = 100
    levels = 50
  }
}

# min cannot go below 1.
pool "rerank" {
  port = 10003
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  weights {
    max    = 4
    levels = 8
  }
}
