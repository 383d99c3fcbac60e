pool "chat" {
  port = 10000
  hash {
    algorithm = "consistent"
    key { header = "x-session-id" }
  }
}
