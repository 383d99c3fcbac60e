# Valid body keys: Envoy reads them from the JSON body; gRPC clients are
# told they only hash on the header key. prompt_prefix without a
# balance_factor gets the default bounded load (150).
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    key { json_field = "prompt_cache_key" }
    key { json_field = "user" }
    key { json_field = "metadata.conversation_id" }
    key { prompt_prefix = 4096 }
  }
  static { endpoints = ["10.0.0.1:8000"] }
}

pool "completions" {
  port = 10001
  hash {
    max_body_bytes = 65536
    key { prompt_prefix = 2048 }
  }
}
