pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
}

pool "code" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
}

# A wildcard listener overlaps every address on its port.
pool "embed" {
  port           = 10000
  listen_address = "127.0.0.1"
  hash {
    key { header = "x-session-id" }
  }
}
