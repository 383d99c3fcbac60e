xds {
  address                 = "127.0.0.1:18000"
  max_streams_per_address = -1
  keepalive_time          = "500ms"
  keepalive_timeout       = "10"
  keepalive_min_ping      = "10s"
  tls {
    cert_file = ""
    ca_file   = "ca.crt"
  }
  tls {
    cert_file = "tls.crt"
    key_file  = 42
  }
}

admin {
  adress     = "0.0.0.0:19000"
  token_file = ["token"]
  tls {
    key_file       = "tls.key"
    client_ca_file = "ca.crt"
  }
}

pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
}
