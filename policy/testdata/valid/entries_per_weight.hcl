# Envoy's ring sized by entries per unit of healthy weight: only the
# changed replica's sessions move when replicas come, go or change weight.
pool "chat" {
  port = 10000
  hash {
    entries_per_weight = 1024
    key { header = "x-session-id" }
  }
  static {
    endpoints = ["10.0.0.1:8000", "10.0.0.2:8000"]
  }
}
