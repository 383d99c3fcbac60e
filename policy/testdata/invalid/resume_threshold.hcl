pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    max_queue_depth     = 8
    resume_queue_depth  = 8
    resume_kv_occupancy = 1
  }
}

pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    max_kv_occupancy    = 0.5
    resume_kv_occupancy = 0.6
    resume_queue_depth  = -1
  }
}
