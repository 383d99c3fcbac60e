# Static endpoints with weights, stable hash identities and localities.
pool "code" {
  port = 10002

  hash {
    key { header = "x-session-id" }
  }

  static {
    endpoints = ["10.0.0.1:8000"]

    endpoint "10.0.0.2:8000" {
      weight   = 3
      hash_key = "replica-a"
      region   = "eu-west-1"
      zone     = "eu-west-1a"
      sub_zone = "rack-1"
    }

    endpoint "[2001:db8::2]:8000" {
      weight   = 128
      hash_key = "replica-b"
    }

    endpoint "10.0.0.3:8000" {}
  }
}
