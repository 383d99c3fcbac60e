admin { address = "127.0.0.1:0" }

pool "chat" {
  port = 70000
  hash {
    key { header = "x-session-id" }
  }
  static {
    endpoints = ["127.0.0.1:65536", "127.0.0.1:http"]
  }
}

pool "code" {
  port = 0
  hash {
    key { header = "x-session-id" }
  }
}

pool "embed" {
  port = 100.5
  hash {
    key { header = "x-session-id" }
  }
}
