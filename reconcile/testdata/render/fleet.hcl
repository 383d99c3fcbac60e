# Two pools: chat on Maglev with weighted replicas in two zones, and an
# agent pool on a ring hash keyed by cookie, then query parameter.
pool "chat" {
  port          = 10000
  idle_timeout  = "5m"

  hash {
    algorithm      = "maglev"
    table_size     = 131071
    balance_factor = 125
    key { header = "x-session-id" }
    key { header = "x-tenant-id" }
  }

  static {
    endpoint "10.0.1.10:8000" {
      weight   = 2
      hash_key = "h100-a"
      region   = "eu-west1"
      zone     = "eu-west1-b"
    }
    endpoint "10.0.2.10:8000" {
      weight   = 1
      hash_key = "l40s-a"
      region   = "eu-west1"
      zone     = "eu-west1-c"
    }
    endpoint "10.0.1.11:8000" {
      hash_key = "h100-b"
      region   = "eu-west1"
      zone     = "eu-west1-b"
    }
  }
}

pool "agents" {
  port           = 10001
  listen_address = "127.0.0.1"
  route_timeout  = "30m"

  hash {
    algorithm     = "ring_hash"
    max_ring_size = 4096
    key { cookie = "agent-session" }
    key { query_parameter = "trace" }
  }

  static {
    endpoints = ["[fd00::1]:8000", "[fd00::2]:8000"]
  }
}
