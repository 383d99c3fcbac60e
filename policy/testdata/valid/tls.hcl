# xDS over mutual TLS, and a protected admin server reachable from other
# hosts. Paths are relative to this file.
xds {
  address                     = "0.0.0.0:18000"
  max_streams_per_address     = 16
  keepalive_time              = "1m"
  keepalive_timeout           = "20s"
  keepalive_min_ping_interval = "10s"
  tls {
    cert_file      = "tls/tls.crt"
    key_file       = "tls/tls.key"
    client_ca_file = "/etc/kvxds/ca/ca.crt"
  }
}

admin {
  address    = "0.0.0.0:19000"
  token_file = "../secrets/admin-token"
  tls {
    cert_file = "tls/tls.crt"
    key_file  = "tls/tls.key"
  }
}

pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
}
