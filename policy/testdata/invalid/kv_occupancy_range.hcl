pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    max_kv_occupancy    = 1.5
    resume_kv_occupancy = 0.95
  }
}

pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    max_kv_occupancy    = 0
    max_queue_depth     = 0
    max_preemption_rate = -0.5
    hold                = "-30s"
  }
}

pool "embed" {
  port = 10002
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    max_kv_occupancy = "90%"
    max_queue_depth  = 1e400
  }
}
