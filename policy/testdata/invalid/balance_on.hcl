pool "chat" {
  port = 10000
  hash {
    balance_on = "tokens"
    key { header = "x-session-id" }
  }
}

pool "agents" {
  port = 10001
  hash {
    balance_on = "prompt_bytes"
    key { header = "x-session-id" }
  }
}
