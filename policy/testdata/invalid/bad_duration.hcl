pool "chat" {
  port          = 10000
  route_timeout = "10 minutes"
  idle_timeout  = "0s"
  hash {
    key { header = "x-session-id" }
  }
}

pool "code" {
  port          = 10001
  route_timeout = 600
  idle_timeout  = "-5m"
  hash {
    key { header = "x-session-id" }
  }
}
