pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  group "acme" {
    match {
      header = "x-tenant-id"
      values = ["acme"]
    }
    replicas = 0
  }
  group "acme" {
    match {
      header = "x-tenant-id"
      values = ["other"]
    }
    replicas = 1
  }
  group "-bad" {
    replicas  = 2
    exclusive = "yes"
  }
  group "dup" {
    match {
      header = "x-tenant-id"
      values = ["b", "b", ""]
    }
    match {
      header = "x-tenant-id"
      values = ["c"]
    }
  }
  group "clash" {
    match {
      header = "X-Tenant-Id"
      values = ["acme2", "z"]
    }
    replicas = 1
  }
  group "clash2" {
    match {
      header = "x-tenant-id"
      values = ["z"]
    }
    replicas = 1
  }
  group "nohdr" {
    match {
      values = []
    }
    replicas = 1
  }
}

pool "rr" {
  port           = 10001
  load_balancing = "round_robin"
  group "g" {
    match {
      header = "x-tenant-id"
      values = ["a"]
    }
    replicas = 1
  }
}
