# The conversation key: true is the only value that makes a key, it is a
# single key of a chain, and it needs bounded load like prompt_prefix.
pool "chat" {
  port = 10000
  hash {
    balance_factor = 0
    key { conversation = true }
    key { conversation = true }
    key { conversation = false }
    key { conversation = "yes" }
    key {
      conversation = true
      header       = "x-session-id"
    }
  }
}
