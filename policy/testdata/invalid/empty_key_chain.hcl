pool "chat" {
  port = 10000
  hash {
    algorithm = "maglev"
  }
}

pool "code" {
  port = 10001
  hash {
    key {}
  }
}
