pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
}

pool "chat" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
}
