# Valid, with a warning: spreading by the chain's own key spreads nothing.
pool "chat" {
  port = 10000
  hash {
    key { conversation = true }
    hot_keys {
      spread_by { conversation = true }
    }
  }
}
