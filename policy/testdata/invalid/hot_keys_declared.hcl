pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    key { header = "x-tenant-id" }
    key { conversation = true }
    key { cookie = "sid" }
    hot_keys {
      max = 2
      declared {
        header = "X-Tenant-Id"
        values = ["acme", "acme", "", " padded", "tab\there", "é"]
      }
      declared {
        header = "x-tenant-id"
        values = ["globex"]
      }
      declared {
        header = "sid"
        values = ["a"]
      }
      declared {
        header = "x-session-id"
        values = ["s1", "s2"]
      }
      declared {
        header = "x-session-id"
      }
      declared {
        values = ["orphan"]
      }
      declared {
        header = "x-session-id"
        values = []
      }
    }
  }
}

pool "bodies" {
  port = 10001
  hash {
    key { conversation = true }
    hot_keys {
      declared {
        header = "x-app-id"
        values = ["app-0"]
      }
    }
  }
}

pool "long" {
  port = 10002
  hash {
    key { header = "x-app-id" }
    hot_keys {
      declared {
        header = "x-app-id"
        values = ["app-0", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]
      }
    }
  }
}
