pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    key { conversation = true }
    hot_keys {
      enabled     = "yes"
      share       = 1
      max         = 0
      log_cluster = "two words"
      interval    = "0s"
      half_life   = "soon"
      spread_by {
        conversation  = true
        prompt_prefix = 128
      }
      spread_by {}
    }
    hot_keys {
      share = 0
      spread_by { prompt_prefix = 8 }
    }
  }
}

pool "docs" {
  port = 10001
  hash {
    key { header = "x-kvxds-spread" }
    key { json_field = "user" }
    hot_keys {
      max = 257
      spread_by { json_field = "a..b" }
    }
  }
}

pool "short" {
  port = 10002
  hash {
    max_body_bytes = 2048
    key { header = "x-session-id" }
    hot_keys {
      spread_by { prompt_prefix = 4096 }
    }
  }
}
