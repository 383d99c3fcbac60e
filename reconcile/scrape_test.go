package reconcile

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/weights"
)

func mustParse(t testing.TB, src string) *policy.Policy {
	t.Helper()
	p, diags := policy.Parse([]byte(src), "test.hcl")
	if diags.HasErrors() {
		t.Fatal(policy.Format(diags))
	}
	return p
}

// Decisions fold into the joined fleet by replica identity: a weight
// multiplies the static weight, a saturated replica drains, a replica
// without a decision and a pool without decisions are unchanged.
func TestJoinDecisions(t *testing.T) {
	p := mustParse(t, `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
}
pool "batch" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
}
`)
	discovered := []discovery.PoolTargets{
		{Pool: "chat", Targets: []fleet.Endpoint{
			{Host: "10.0.0.1", Port: 80, HashKey: "a", Weight: 2},
			{Host: "10.0.0.2", Port: 80, HashKey: "b"},
			{Host: "10.0.0.3", Port: 80, Weight: 3}, // identity: its address
			{Host: "10.0.0.4", Port: 80, HashKey: "d", Health: fleet.Draining},
			{Host: "10.0.0.5", Port: 80, HashKey: "e", Health: fleet.Draining},
		}},
		{Pool: "batch", Targets: []fleet.Endpoint{{Host: "10.0.0.1", Port: 80, HashKey: "a", Weight: 5}}},
	}
	before := slices.Clone(discovered[0].Targets)
	got := Join(p, discovered, map[string]map[string]weights.Decision{
		"chat": {
			"a":           {Weight: 4, Cached: 12},
			"b":           {Weight: 2, Saturated: true, Cached: 200}, // past the last band: the last
			"10.0.0.3:80": {Weight: 2},
			"d":           {Weight: 3},                  // a terminating replica stays draining
			"e":           {Weight: 1, Saturated: true}, // and is not saturated: it leaves
		},
	}).Normalize()
	// Discovered targets are shared with the next push.
	if !slices.Equal(discovered[0].Targets, before) {
		t.Errorf("Join changed the discovered targets: %+v", discovered[0].Targets)
	}
	want := map[string]fleet.Endpoint{
		"a":           {Host: "10.0.0.1", Port: 80, HashKey: "a", Weight: 8, Cached: 12},
		"b":           {Host: "10.0.0.2", Port: 80, HashKey: "b", Weight: 2, Health: fleet.Draining, Saturated: true, Cached: fleet.MaxCached},
		"10.0.0.3:80": {Host: "10.0.0.3", Port: 80, HashKey: "10.0.0.3:80", Weight: 6},
		"d":           {Host: "10.0.0.4", Port: 80, HashKey: "d", Weight: 3, Health: fleet.Draining},
		"e":           {Host: "10.0.0.5", Port: 80, HashKey: "e", Weight: 1, Health: fleet.Draining},
	}
	for _, pool := range got.Pools {
		for _, e := range pool.Endpoints {
			switch pool.Name {
			case "chat":
				if e != want[e.HashKey] {
					t.Errorf("chat %s = %+v, want %+v", e.HashKey, e, want[e.HashKey])
				}
			case "batch":
				if e.Weight != 5 || e.Health != fleet.Healthy {
					t.Errorf("a pool without decisions changed: %+v", e)
				}
			}
		}
	}
}

func TestScrapeSpecs(t *testing.T) {
	p := mustParse(t, `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    engine   = "custom"
    port     = 9090
    path     = "/stats"
    interval = "3s"
    signal "queue_depth" {
      metric = "q"
      labels = { gpu = "0" }
    }
    signal "kv_occupancy" {
      metric = "kv"
      scale  = 0.01
    }
  }
}
pool "plain" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
}
`)
	hash := fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}}
	m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{
		{Name: "chat", Settings: fleet.Settings{Port: 10000, Hash: hash}, Endpoints: []fleet.Endpoint{{Host: "10.0.0.1", Port: 8000, HashKey: "vllm-0"}, {Host: "fd00::1", Port: 8000}}},
		{Name: "plain", Settings: fleet.Settings{Port: 10001, Hash: hash}, Endpoints: []fleet.Endpoint{{Host: "10.0.0.9", Port: 8000}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	specs, bad := ScrapeSpecs(p, m)
	if len(bad) != 0 || len(specs) != 1 {
		t.Fatalf("specs %v, errors %v: want chat only", specs, bad)
	}
	s := specs["chat"]
	if s.Interval.Seconds() != 3 || s.Profile == nil {
		t.Fatalf("chat = %+v", s)
	}
	if q := s.Profile.QueueDepth; len(q) != 1 || q[0].Name != "q" || q[0].Labels["gpu"] != "0" {
		t.Errorf("queue depth = %+v", q)
	}
	if kv := s.Profile.KVOccupancy; len(kv) != 1 || kv[0].Scale != 0.01 || len(s.Profile.Running) != 0 {
		t.Errorf("kv = %+v, running = %+v", kv, s.Profile.Running)
	}
	want := []weights.Target{
		{ID: "[fd00::1]:8000", URL: "http://[fd00::1]:9090/stats"},
		{ID: "vllm-0", URL: "http://10.0.0.1:9090/stats"},
	}
	if len(s.Targets) != len(want) {
		t.Fatalf("targets %+v", s.Targets)
	}
	for i, tg := range s.Targets {
		if tg.ID != want[i].ID || tg.URL != want[i].URL {
			t.Errorf("target %d = %s %s, want %s %s", i, tg.ID, tg.URL, want[i].ID, want[i].URL)
		}
	}
}

// groupFixture is a hash pool "chat" of n static replicas with group
// "acme" of 2, exclusive or not, and extra lines in the pool block: the
// policy, the fleet kvxds serves from it, and the group's members by
// identity.
func groupFixture(t *testing.T, n int, exclusive bool, extra string) (*policy.Policy, fleet.Model, map[string]bool) {
	t.Helper()
	var eps []string
	for i := range n {
		eps = append(eps, fmt.Sprintf("%q", fmt.Sprintf("10.0.0.%d:8000", i+1)))
	}
	p := mustParse(t, fmt.Sprintf(`
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = [%s] }
%s
  group "acme" {
    match {
      header = "x-tenant-id"
      values = ["acme"]
    }
    replicas  = 2
    exclusive = %t
  }
}
`, strings.Join(eps, ", "), extra, exclusive))
	m, err := fleet.Prepare(Join(p, StaticTargets(p), nil))
	if err != nil {
		t.Fatal(err)
	}
	f := m.Fleet()
	members := map[string]bool{}
	for _, e := range fleet.GroupMembers(&f.Pools[0], f.Pools[0].Groups[0]) {
		members[e.Identity()] = true
	}
	return p, m, members
}

// The members of an exclusive group are scraped in the group's weight
// domain, the rest in the pool's; a group that is not exclusive keeps its
// members in the pool's.
func TestScrapeSpecsWeightDomains(t *testing.T) {
	for _, exclusive := range []bool{true, false} {
		t.Run(fmt.Sprint("exclusive=", exclusive), func(t *testing.T) {
			p, m, members := groupFixture(t, 5, exclusive, "  metrics { engine = \"vllm\" }\n  weights { relative = true }")
			specs, bad := ScrapeSpecs(p, m)
			if len(bad) != 0 {
				t.Fatal(bad)
			}
			targets := specs["chat"].Targets
			if len(targets) != 5 || len(members) != 2 {
				t.Fatalf("%d targets, %d members", len(targets), len(members))
			}
			for _, tg := range targets {
				want := ""
				if exclusive && members[tg.ID] {
					want = "acme"
				}
				if tg.Domain != want {
					t.Errorf("%s: domain %q, want %q", tg.ID, tg.Domain, want)
				}
			}
		})
	}
}

// Each engine's replicas are scraped on its own Prometheus page unless the
// policy names one: trtllm-serve's /metrics is JSON.
func TestScrapeSpecsEnginePath(t *testing.T) {
	for _, tc := range []struct{ engine, path, want string }{
		{"vllm", "", "http://10.0.0.1:8000/metrics"},
		{"sglang", "", "http://10.0.0.1:8000/metrics"},
		{"trtllm", "", "http://10.0.0.1:8000/prometheus/metrics"},
		{"trtllm", `path = "/custom"`, "http://10.0.0.1:8000/custom"},
	} {
		p := mustParse(t, fmt.Sprintf(`
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  metrics {
    engine = %q
    %s
  }
}
`, tc.engine, tc.path))
		m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{{Name: "chat", Settings: fleet.Settings{Port: 10000, Hash: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}}},
			Endpoints: []fleet.Endpoint{{Host: "10.0.0.1", Port: 8000}}}}})
		if err != nil {
			t.Fatal(err)
		}
		specs, bad := ScrapeSpecs(p, m)
		if len(bad) != 0 || len(specs["chat"].Targets) != 1 {
			t.Fatalf("%s: specs %+v, errors %v", tc.engine, specs, bad)
		}
		if got := specs["chat"].Targets[0].URL; got != tc.want {
			t.Errorf("%s %s: URL %s, want %s", tc.engine, tc.path, got, tc.want)
		}
	}
}
