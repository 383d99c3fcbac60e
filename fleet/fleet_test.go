package fleet

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func pool(name string, port uint32, eps ...Endpoint) Pool {
	return Pool{Name: name, Settings: Settings{Port: port, Hash: Hash{Keys: []HashKey{{Header: "x-session-id"}}}}, Endpoints: eps}
}

func TestNormalize(t *testing.T) {
	in := Fleet{Pools: []Pool{
		pool("b", 2, Endpoint{Host: "10.0.0.2", Port: 80}, Endpoint{Host: "::1", Port: 80, HashKey: "a"}),
		pool("a", 1),
	}}
	out := in.Normalize()
	if out.Pools[0].Name != "a" || out.Pools[1].Name != "b" {
		t.Fatalf("pools not sorted: %s, %s", out.Pools[0].Name, out.Pools[1].Name)
	}
	b := out.Pools[1]
	if b.ListenAddress != DefaultListenAddress || b.Hash.Algorithm != Maglev || b.Hash.TableSize != DefaultMaglevTableSize || b.Hash.Keyless != RoundRobin {
		t.Errorf("defaults not applied: %+v", b)
	}
	if b.Endpoints[0].HashKey != "10.0.0.2:80" || b.Endpoints[1].HashKey != "a" || b.Endpoints[0].Weight != 1 {
		t.Errorf("endpoints not defaulted and sorted by identity: %+v", b.Endpoints)
	}
	if in.Pools[0].Name != "b" || in.Pools[0].Endpoints[0].HashKey != "" {
		t.Error("Normalize modified its receiver")
	}
	if got := (Endpoint{Host: "::1", Port: 80}).Address(); got != "[::1]:80" {
		t.Errorf("IPv6 address = %s", got)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Fleet
		want string // "" = valid
	}{
		{"valid", Fleet{Pools: []Pool{pool("a", 1, Endpoint{Host: "10.0.0.1", Port: 1})}}, ""},
		{"hostname", Fleet{Pools: []Pool{pool("a", 1, Endpoint{Host: "vllm.svc", Port: 1})}}, "not an IP address"},
		{"empty pool", Fleet{Pools: []Pool{pool("a", 1)}}, ""},
		{"duplicate name", Fleet{Pools: []Pool{pool("a", 1), pool("a", 2)}}, "duplicate name"},
		{"duplicate port", Fleet{Pools: []Pool{pool("a", 1), pool("b", 1)}}, "already used"},
		{"bad port", Fleet{Pools: []Pool{pool("a", 0)}}, "out of range"},
		{"no key", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1}}}}, "no hash key"},
		{"two sources", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{Keys: []HashKey{{Header: "h", Cookie: "c"}}}}}}}, "exactly one source"},
		{"conversation and prefix", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{MaxBodyBytes: 1024, Keys: []HashKey{{Conversation: true, PromptPrefix: 64}}}}}}}, "exactly one source"},
		{"conversation without a body limit", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{Keys: []HashKey{{Conversation: true}}}}}}}, "positive body limit"},
		// Hot keys read their spread sub-key from the body: Normalize
		// gives them the default limit, and a negative one is refused.
		{"hot keys without a body limit", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{Hot: &HotKeys{}, Keys: []HashKey{{Header: "h"}}}}}}}, ""},
		{"hot keys with a negative body limit", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{Hot: &HotKeys{}, MaxBodyBytes: -1, Keys: []HashKey{{Header: "h"}}}}}}}, "hot keys need a positive body limit"},
		{"low balance", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{BalanceFactor: 50, Keys: []HashKey{{Header: "h"}}}}}}}, "below 100"},
		{"balance on tokens", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{BalanceFactor: 150, BalanceOn: "tokens", Keys: []HashKey{{Header: "h"}}}}}}}, "unknown balance_on"},
		{"bytes unbounded", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{BalanceOn: BalanceOnPromptBytes, Keys: []HashKey{{Header: "h"}}}}}}}, "without a balance factor"},
		{"duplicate identity", Fleet{Pools: []Pool{pool("a", 1, Endpoint{Host: "10.0.0.1", Port: 1, HashKey: "x"}, Endpoint{Host: "10.0.0.1", Port: 2, HashKey: "x"})}}, "duplicate endpoint identity"},
		{"keyless least request", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{Keyless: LeastRequest, Keys: []HashKey{{Header: "h"}}}}}}}, ""},
		{"keyless random", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{Keyless: Random, Keys: []HashKey{{Header: "h"}}}}}}}, ""},
		{"bad keyless", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{Keyless: ConsistentHash, Keys: []HashKey{{Header: "h"}}}}}}}, "unknown keyless balancer"},
		{"slash in name", Fleet{Pools: []Pool{pool("a/keyless", 1)}}, "contains '/'"},
		{"bad algorithm", Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Hash: Hash{Algorithm: "random", Keys: []HashKey{{Header: "h"}}}}}}}, "unknown hash algorithm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.Normalize().Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// The serialised form (/debug/fleet) reads well and round-trips.
func TestJSON(t *testing.T) {
	f := Fleet{Pools: []Pool{{
		Name: "chat", Settings: Settings{
			ListenAddress: "0.0.0.0",
			Port:          10000,
			RouteTimeout:  10 * time.Minute,
			Balancer:      ConsistentHash,
			Hash:          Hash{Algorithm: Maglev, TableSize: 65537, Keys: []HashKey{{Header: "x-session-id"}}, Keyless: RoundRobin},
		},
		Endpoints: []Endpoint{{Host: "10.0.0.1", Port: 8000, Weight: 2, Health: Draining, HashKey: "vllm-0", Locality: Locality{Zone: "z1"}}},
	}}}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"pools":[{"name":"chat","listen_address":"0.0.0.0","port":10000,"balancer":"hash","hash":{"algorithm":"maglev","table_size":65537,"keys":[{"header":"x-session-id"}],"keyless":"round_robin"},"endpoints":[{"host":"10.0.0.1","port":8000,"weight":2,"health":"draining","locality":{"zone":"z1"},"hash_key":"vllm-0"}],"route_timeout":"10m0s"}]}`
	if string(b) != want {
		t.Errorf("JSON\n got %s\nwant %s", b, want)
	}
	var back Fleet
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, f) {
		t.Errorf("round trip: %+v, want %+v", back, f)
	}
	if err := json.Unmarshal([]byte(`{"pools":[{"endpoints":[{"health":"sleepy"}]}]}`), &back); err == nil {
		t.Error("unknown health accepted")
	}
}

func TestValidateGroups(t *testing.T) {
	good := Group{Name: "acme", Header: "x-tenant-id", Values: []string{"acme"}, Replicas: 2}
	for _, tc := range []struct {
		name     string
		balancer Balancer
		groups   []Group
		err      string // "" = valid
	}{
		{"valid", "", []Group{good}, ""},
		{"round robin", RoundRobin, []Group{good}, "need consistent hashing"},
		{"duplicate", "", []Group{good, good}, "duplicate name"},
		{"slash", "", []Group{{Name: "a/b", Header: "h", Values: []string{"v"}, Replicas: 1}}, "contains '/'"},
		{"no header", "", []Group{{Name: "a", Values: []string{"v"}, Replicas: 1}}, "no header"},
		{"empty value", "", []Group{{Name: "a", Header: "h", Values: []string{""}, Replicas: 1}}, "empty one"},
		{"no replicas", "", []Group{{Name: "a", Header: "h", Values: []string{"v"}}}, "below 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pool("chat", 1, Endpoint{Host: "10.0.0.1", Port: 80})
			p.Balancer, p.Groups = tc.balancer, tc.groups
			err := Fleet{Pools: []Pool{p}}.Normalize().Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.err)
			}
		})
	}
}
