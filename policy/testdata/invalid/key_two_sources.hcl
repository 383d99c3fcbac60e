pool "chat" {
  port = 10000
  hash {
    key {
      header = "x-session-id"
      cookie = "session"
    }
  }
}
