# Valid, with warnings: escape and weights act on scraped metrics only.
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  escape {
    max_kv_occupancy = 0.95
  }
  weights {
    max = 8
  }
}
