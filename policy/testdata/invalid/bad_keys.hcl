pool "chat" {
  port = 10000
  hash {
    key { header = "x session" }
    key { header = ":authority" }
    key { header = "" }
    key { cookie = "a;b" }
    key { query_parameter = "a=b" }
    key { header = "X-Session-Id" }
    key { header = "x-session-id" }
    key { cookie = "x-session-id" }
  }
}
