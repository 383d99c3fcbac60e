pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    engine = "custom"
    signal "kv_occupancy" {
      metric = "my-engine_kv_used"
      labels = { device = "gpu", "gpu-id" = "0", __name__ = "x", "0dev" = "y" }
    }
    signal "queue_depth" {
      metric = "9lives"
      labels = { device = ["gpu"], device = "cpu" }
    }
    signal "running" {
      metric = ""
      labels = "device=gpu"
    }
    signal "preemptions" {
      scale = 0
    }
  }
}
