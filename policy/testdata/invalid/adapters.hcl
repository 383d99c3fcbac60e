pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  adapters {
    header      = "bad header"
    body_field  = "a.b"
    base_models = ["base", ""]
    adapters    = ["has space", "ok", "ok", "base"]
    max_lora    = 0
    max         = 1
    interval    = "-1s"
  }
  adapters {}
}

pool "rr" {
  port           = 10001
  load_balancing = "round_robin"
  adapters {}
}
