xds { address = "localhost" }

pool "chat" {
  port           = 10000
  listen_address = "localhost"
  hash {
    key { header = "x-session-id" }
  }
  static {
    endpoints = ["127.0.0.1", "::1:8001", "bad_host!:8001", "10.0.0.300:8001", ""]
    endpoint "[10.0.0.1]:8001" {}
  }
}
