cluster "chat" {
  port = 10000
}

pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  endpoints {
    address = "127.0.0.1:8001"
  }
}
