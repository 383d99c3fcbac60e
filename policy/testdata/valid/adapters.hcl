# A multi-LoRA pool: adapters placed on demand-sized sets of replicas, two
# always placed; the engines report their own max_lora once scraped.
pool "lora" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static {
    endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"]
  }
  metrics {}
  adapters {
    base_models = ["meta-llama/Llama-3.1-8B-Instruct"]
    adapters    = ["sql-lora", "chat-fr"]
    max_lora    = 4
  }
}
