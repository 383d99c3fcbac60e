pool "chat" {
  port    = 10000
  timeout = "10m"

  hash {
    algoritm = "maglev"
    key { header = "x-session-id" }
  }
}
