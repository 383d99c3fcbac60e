pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static {
    endpoints = ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8001"]

    endpoint "127.0.0.1:8002" {
      weight = 2
    }
    endpoint "[::1]:8001" {
      hash_key = "replica-a"
    }
    endpoint "[0:0::1]:8001" {}
    endpoint "10.0.0.9:8001" {}
    endpoint "10.0.0.9:8001" {}
    endpoint "10.0.0.1:8001" {
      hash_key = "replica-a"
    }
    endpoint "10.0.0.2:8001" {
      hash_key = "127.0.0.1:8001"
    }
  }
}
