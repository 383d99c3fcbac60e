pool "chat" {
  port = 10000
  hash {
    balance_factor = 50
    key { header = "x-session-id" }
  }
}
