pool "a" {
  port           = 10000
  load_balancing = "random"
  hash {
    key { header = "x-session-id" }
  }
}

pool "b" {
  port           = 10001
  load_balancing = "round_robin"
  hash {
    key { header = "x-session-id" }
  }
}

pool "c" {
  port           = 10002
  load_balancing = "hash"
}
