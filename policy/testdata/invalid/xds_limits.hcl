xds {
  tls {
    cert_file = "a.crt"
    key_file  = "a.key"
  }
}

xds {
  max_streams_per_address = 1000001
  keepalive_timeout       = "0s"
}

admin {
  tls {}
  token_file = ""
}
