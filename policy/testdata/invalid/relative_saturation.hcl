pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    relative_queue     = 0.5
    relative_kv_margin = 1
  }
}

pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    relative_queue     = -2
    relative_kv_margin = -0.1
  }
}

pool "embed" {
  port = 10002
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    relative_queue     = "twice"
  }
}
