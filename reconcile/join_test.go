package reconcile

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
)

func TestJoin(t *testing.T) {
	src := []byte(`
pool "zeta" {
  port = 10001
  hash {
    algorithm = "ring_hash"
    key { cookie = "sid" }
  }
}
pool "chat" {
  port          = 10000
  route_timeout = "10m"
  hash {
    balance_factor = 150
    key { header = "x-session-id" }
    key { query_parameter = "session" }
  }
  static {
    endpoints = ["127.0.0.1:8002"]
    endpoint "127.0.0.1:8001" {
      weight   = 3
      hash_key = "a"
      zone     = "z1"
    }
  }
}
`)
	p, diags := policy.Parse(src, "join.hcl")
	if diags.HasErrors() {
		t.Fatal(policy.Format(diags))
	}
	// Hot keys are on by default in every hashing pool.
	hot := fleet.DefaultHotKeys()
	want := fleet.Fleet{Pools: []fleet.Pool{
		{
			Name: "chat", Settings: fleet.Settings{
				ListenAddress: "0.0.0.0",
				Port:          10000,
				RouteTimeout:  10 * time.Minute,
				Balancer:      fleet.ConsistentHash,
				Hash: fleet.Hash{
					Algorithm: fleet.Maglev, TableSize: 65537, BalanceFactor: 150, Keyless: fleet.RoundRobin,
					Keys: []fleet.HashKey{{Header: "x-session-id"}, {QueryParameter: "session"}}, Hot: &hot,
					MaxBodyBytes: fleet.DefaultMaxBodyBytes, // the spread sub-key's
				},
			},
			Endpoints: []fleet.Endpoint{
				{Host: "127.0.0.1", Port: 8002, Weight: 1, HashKey: "127.0.0.1:8002"},
				{Host: "127.0.0.1", Port: 8001, Weight: 3, HashKey: "a", Locality: fleet.Locality{Zone: "z1"}},
			},
		},
		{
			Name: "zeta", Settings: fleet.Settings{
				ListenAddress: "0.0.0.0",
				Port:          10001,
				Balancer:      fleet.ConsistentHash,
				Hash: fleet.Hash{Algorithm: fleet.RingHash, Keyless: fleet.RoundRobin, Keys: []fleet.HashKey{{Cookie: "sid"}}, Hot: &hot,
					MaxBodyBytes: fleet.DefaultMaxBodyBytes},
			},
			Endpoints: []fleet.Endpoint{},
		},
	}}
	// Endpoints sort by identity: "127.0.0.1:8002" < "a".
	got := Join(p, StaticTargets(p), nil).Normalize()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Join:\n got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}

	// Discovered targets of unknown pools are ignored; pools without
	// targets are empty.
	got = Join(p, []discovery.PoolTargets{{Pool: "ghost", Targets: []fleet.Endpoint{{Host: "10.0.0.1", Port: 1}}}}, nil)
	for _, pool := range got.Pools {
		if len(pool.Endpoints) != 0 {
			t.Fatalf("pool %s has endpoints %v", pool.Name, pool.Endpoints)
		}
	}

	// A draining target (a terminating pod) is pushed DRAINING.
	got = Join(p, []discovery.PoolTargets{{Pool: "zeta", Targets: []fleet.Endpoint{
		{Host: "10.0.0.1", Port: 1, HashKey: "vllm-0"},
		{Host: "10.0.0.2", Port: 1, HashKey: "vllm-1", Health: fleet.Draining},
	}}}, nil).Normalize()
	if eps := got.Pools[1].Endpoints; len(eps) != 2 || eps[0].Health != fleet.Healthy || eps[1].Health != fleet.Draining {
		t.Fatalf("zeta endpoints %+v, want vllm-0 healthy and vllm-1 draining", eps)
	}
}

// Sources keep their IDs while their blocks do not change, so a reload
// keeps them running; a changed block gets a new ID.
func TestSourceSpecs(t *testing.T) {
	parse := func(src string) []discovery.Spec {
		p, diags := policy.Parse([]byte(src), "sources.hcl")
		if diags.HasErrors() {
			t.Fatal(policy.Format(diags))
		}
		return SourceSpecs(p, hclog.NewNullLogger())
	}
	const pool = `pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  dns {
    name     = "vllm.test"
    resolver = "127.0.0.1:53"
    refresh  = "%s"
  }
  static { endpoints = [%s] }
}
`
	a := parse(fmt.Sprintf(pool, "5s", `"10.0.0.1:80"`))
	b := parse(fmt.Sprintf(pool, "5s", `"10.0.0.1:80"`))
	c := parse(fmt.Sprintf(pool, "6s", `"10.0.0.2:80"`))
	if len(a) != 2 || a[0].ID != b[0].ID || a[1].ID != b[1].ID {
		t.Fatalf("equal policies give different sources: %v, %v", a, b)
	}
	if a[0].ID == c[0].ID || a[1].ID == c[1].ID {
		t.Fatalf("changed blocks keep their IDs: %v, %v", a, c)
	}
}

// Every valid policy's metric settings must make a scraper's settings
// valid for weights.Step: the policy and the scraper cannot drift apart.
func TestPolicySettingsValidForStep(t *testing.T) {
	files, _ := filepath.Glob("../policy/testdata/valid/*.hcl")
	more, _ := filepath.Glob("testdata/render/*.hcl")
	files = append(files, more...)
	n := 0
	for _, file := range files {
		p, diags := policy.Load(file)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", file, policy.Format(diags))
		}
		specs, bad := ScrapeSpecs(p, fleet.Model{})
		for pool, err := range bad {
			t.Errorf("%s pool %s: %v", file, pool, err)
		}
		for pool, spec := range specs {
			n++
			if err := spec.Config.Validate(); err != nil {
				t.Errorf("%s pool %s: %v", file, pool, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no pool with a metrics block found")
	}
}
