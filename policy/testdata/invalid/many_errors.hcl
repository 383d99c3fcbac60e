xds { address = "127.0.0.1" }

pool "chat" {
  port          = 10000
  route_timeout = "forever"

  hash {
    algorithm      = "maglev"
    table_size     = 65536
    balance_factor = 50
    key { header = "x-session-id" }
    key { header = "x-session-id" }
  }

  static {
    endpoints = ["127.0.0.1:8001", "127.0.0.1:99999"]
  }
}

pool "chat" {
  port = 10000

  hash {
    algorithm = "rendezvous"
  }
}

pool "code" {
  hash {
    key {
      header          = "x-session-id"
      query_parameter = "session"
    }
  }
  weight = 3
}
