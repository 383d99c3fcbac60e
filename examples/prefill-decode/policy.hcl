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
    # With a prompt_prefix key balance_factor defaults to 250 (a prefix
    # no Envoy sent lately: 100), and the bound counts each prefill replica's
    # prompt bytes in flight, weighed by what its prefix cache leaves to
    # compute, rather than its requests; balance_on = "requests" would
    # count requests.
  }
  kubernetes {
    namespace = "llm"
    service   = "vllm-prefill"
    port      = "http"
  }
  metrics {}
}
