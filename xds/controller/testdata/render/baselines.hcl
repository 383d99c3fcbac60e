# Baseline balancers, to measure what cache affinity gains.
pool "rr" {
  port           = 10000
  load_balancing = "round_robin"
  static {
    endpoints = ["10.0.0.1:8000", "10.0.0.2:8000"]
  }
}

pool "lr" {
  port           = 10001
  load_balancing = "least_request"
  static {
    endpoints = ["10.0.0.1:8000", "10.0.0.2:8000"]
  }
}
