pool "chat" {
  port = 10000
  hash {
    balance_factor = 0
    max_body_bytes = 2048
    key { json_field = "" }
    key { json_field = "metadata..id" }
    key { json_field = "say \"hi\"" }
    key { prompt_prefix = 16 }
    key { prompt_prefix = 4096 }
    key { header = "X-KVXDS-KEY-1" }
    key {
      json_field    = "user"
      prompt_prefix = 1024
    }
    key { json_field = "user" }
    key { json_field = "user" }
    key { prompt_prefix = "many" }
  }
}

pool "headers" {
  port = 10001
  hash {
    max_body_bytes = 100
    key { header = "x-session-id" }
    hot_keys { enabled = false }
  }
}
