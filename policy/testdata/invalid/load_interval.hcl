pool "chat" {
  port = 10000
  hash {
    balance_factor = 150
    load_interval  = "1s"
    key { header = "x-session-id" }
  }
}

pool "agents" {
  port = 10001
  hash {
    balance_factor = 150
    balance_on     = "prompt_bytes"
    load_interval  = "5ms"
    key { header = "x-session-id" }
  }
}

pool "batch" {
  port = 10002
  hash {
    balance_factor = 150
    balance_on     = "prompt_bytes"
    load_interval  = "soon"
    key { header = "x-session-id" }
  }
}
