pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static {
    endpoint "127.0.0.1:8001" {
      weight = 0
    }
    endpoint "127.0.0.1:8002" {
      weight   = 129
      hash_key = ""
      region   = ["eu"]
      rack     = "r1"
    }
    endpoint "127.0.0.1:8003" "extra" {}
  }
}
