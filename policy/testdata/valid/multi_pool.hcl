# Several pools, declared out of order; the policy sorts them by name.
xds   { address = ":18000" }
admin { address = "localhost:19000" }

pool "z-large" {
  port          = 10010
  route_timeout = "0s"

  hash {
    algorithm      = "maglev"
    table_size     = 5000011
    balance_factor = 0
    keyless        = "random"
    key { header = "x-session-id" }
  }

  static {
    endpoints = ["10.1.0.1:8000", "10.1.0.2:8000", "10.1.0.3:8000"]
  }
}

# An empty pool: endpoints may come from discovery later.
pool "a.small_pool-1" {
  port = 10011

  hash {
    table_size = 251
    key { header = "x-session-id" }
  }
}

# m-loopback and m-loopback2 share a port, each on its own address.
pool "m-loopback" {
  port           = 10012
  listen_address = "127.0.0.1"
  idle_timeout   = ""  # Envoy's default, as if omitted

  hash {
    key { header = "x-session-id" }
  }
}

pool "m-loopback2" {
  port           = 10012
  listen_address = "127.0.0.2"

  hash {
    algorithm = "ring_hash"
    key { header = "x-session-id" }
  }
}
