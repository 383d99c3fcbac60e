pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    sustain = "-2s"
  }
}

# With balance_factor the default sustain is longer; the hint says so.
pool "code" {
  port = 10001
  hash {
    key { header = "x-session-id" }
    balance_factor = 150
  }
  metrics {}
  escape {
    sustain = 4
  }
}

pool "embed" {
  port = 10002
  hash {
    key { header = "x-session-id" }
  }
  metrics {}
  escape {
    sustain = "soon"
  }
}
