pool "chat" {
  port = 10000
  hash {
    algorithm  = "maglev"
    table_size = 65536
    key { header = "x-session-id" }
  }
}

pool "code" {
  port = 10001
  hash {
    table_size = 10000000
    key { header = "x-session-id" }
  }
}

pool "tiny" {
  port = 10002
  hash {
    table_size = 1
    key { header = "x-session-id" }
  }
}
