pool "chat" {
}

pool "" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
}

pool "-bad" {
  port = 10002
  hash {
    key { header = "x-session-id" }
  }
}

pool "bad/name" {
  port = 10003
  hash {
    key { header = "x-session-id" }
  }
}
