# Prefill/decode disaggregation behind Envoy, for decode pods running
# llm-d's routing sidecar: Envoy (port 10000) sends each request to a
# decode pod by least request and names the prefill pod its prompt prefix
# picks in x-prefiller-host-port; the sidecar prefills there, the decode
# pod pulls the KV cache and generates. Clients that orchestrate the two
# steps themselves use port 10001 (prefill, hashed) and port 10000.

pool "llama" {
  port           = 10000
  load_balancing = "least_request"
  prefill {
    pool           = "llama-prefill"
    min_body_bytes = 1024 # a prompt this short prefills on its decode pod
  }
  kubernetes {
    namespace = "llm"
    service   = "vllm-decode"
    port      = "http"
  }
  metrics {}
}

pool "llama-prefill" {
  port = 10001
  hash {
    key { prompt_prefix = 512 }
    key { header = "x-session-id" }
    balance_factor = 150
    # Prompts that differ a hundredfold in length and rarely share more
    # than their first blocks: bound each prefill replica's prompt bytes
    # in flight rather than its requests.
    # balance_on = "prompt_bytes"
  }
  kubernetes {
    namespace = "llm"
    service   = "vllm-prefill"
    port      = "http"
  }
  metrics {}
}
