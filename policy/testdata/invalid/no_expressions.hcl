pool "chat" {
  port = var.port
  hash {
    algorithm = lower("MAGLEV")
    key { header = "x-${tenant}" }
  }
  static {
    endpoints = "127.0.0.1:8001"
  }
}
