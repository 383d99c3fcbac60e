pool "a" {
  port = 10000
  hash {
    keyless = "sticky"
    key { header = "x-session-id" }
  }
}

pool "b" {
  port = 10001
  hash {
    keyless = 3
    key { header = "x-session-id" }
  }
}
