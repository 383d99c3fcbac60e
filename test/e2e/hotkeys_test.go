package e2e

import (
	"fmt"
	"slices"
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/translate"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// startHotKeysServer serves pool "chat" over bs, hashing on header
// x-tenant, with a hot-key table the test sets (the table is decided
// elsewhere; this test serves one).
func startHotKeysServer(t *testing.T, bs []*backend) *modelServer {
	t.Helper()
	hot := fleet.DefaultHotKeys()
	p := fleet.Pool{Name: "chat", Settings: fleet.Settings{Port: 10000, Hash: fleet.Hash{
		Keys: []fleet.HashKey{{Header: "x-tenant"}}, Hot: &hot,
	}}}
	s := startModelServer(t, p, bs, func(b *backend) string { return b.id })
	serveHotKeys(t, s, nil)
	return s
}

// serveHotKeys pushes the pool with table as its hot keys.
func serveHotKeys(t *testing.T, s *modelServer, table []fleet.HotKey) {
	t.Helper()
	s.push(t, func(p *fleet.Pool) { p.HotKeys = table })
}

// spreadValues are n spread header values of distinct conversations.
func spreadValues(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = bodykey.Spread([]byte(fmt.Sprintf("conversation-%05d", i)))
	}
	return out
}

// A hot key of a header key spreads over several replicas, one
// conversation (spread value) on one replica, while a request of the key
// without a spread header stays on the key's home, and a cold key's
// requests all land on its one replica, whatever spread they carry. The
// table reaches the clients as a route update alone.
func TestHotKeysProxyless(t *testing.T) {
	t.Run("python C-core", func(t *testing.T) {
		t.Skip("Debian's C-core 1.51 crashes on its first ring-hash pick (grpc #31766), and hot keys need a ring hash; kvxds serves it round robin")
	})
	for _, dp := range dataPlanes {
		t.Run(dp.name, func(t *testing.T) {
			bs := startBackends(t, 6)
			h := startHotKeysServer(t, bs)
			cl := dp.new(t, h.addr)
			one := func(md ...string) string {
				t.Helper()
				ids, errs := cl.callMany([][]string{md})
				if errs[0] != nil {
					t.Fatalf("%s: call %v: %v", dp.name, md, errs[0])
				}
				return ids[0]
			}

			// Before the key is hot: its home, where spread headers change
			// nothing.
			home := one("x-tenant", "acme")
			coldHome := one("x-tenant", "globex")
			spreads := spreadValues(64)
			for _, s := range spreads[:8] {
				if got := one("x-tenant", "acme", bodykey.SpreadHeader, s); got != home {
					t.Fatalf("before the table: spread %s on %s, want the home %s", s, got, home)
				}
			}

			kind := translate.GRPC
			if dp.name == "grpc-js" {
				kind = translate.GRPCJS
			}
			before := h.srv.Versions(kind)
			serveHotKeys(t, h, []fleet.HotKey{{Key: 0, Value: "acme", Share: 0.6, Spread: 8}})
			after := h.srv.Versions(kind)
			for typ, v := range before {
				if changed := after[typ] != v; changed != (typ == resourcev3.RouteType) {
					t.Errorf("%s version %s -> %s: a table change is a route update alone", typ, v, after[typ])
				}
			}

			calls := make([][]string, len(spreads))
			for i, s := range spreads {
				calls[i] = []string{"x-tenant", "acme", bodykey.SpreadHeader, s}
			}
			// Ring hash connects to a replica when a pick first needs it,
			// and sends the pick on to the next ready one meanwhile: wait
			// for two passes in a row that agree.
			var where []string
			eventually(t, dp.name+" spreads the hot key", func() bool {
				ids, errs := cl.callMany(calls)
				for _, err := range errs {
					if err != nil {
						t.Fatalf("%s: %v", dp.name, err)
					}
				}
				stable := slices.Equal(ids, where)
				where = ids
				return stable && len(distinct(ids)) > 1
			})
			// Each conversation stays on its replica, pass after pass, and
			// only the first log2(8) = 3 bits of its spread value count.
			for pass := range 2 {
				again := make([][]string, len(spreads))
				for i, s := range spreads {
					tail := "00000"
					if pass == 1 {
						tail = "11111"
					}
					again[i] = []string{"x-tenant", "acme", bodykey.SpreadHeader, s[:3] + tail}
				}
				ids, errs := cl.callMany(again)
				for i, id := range ids {
					if errs[i] != nil || id != where[i] {
						t.Errorf("pass %d: spread %s on %s (%v), first on %s", pass, again[i][3], id, errs[i], where[i])
					}
				}
			}
			n := distinct(where)
			if len(n) < 3 || len(n) > 8 {
				t.Errorf("hot key over %d replicas (%v), want 3 to 8 of 6 at spread 8", len(n), n)
			}
			t.Logf("%s: 64 conversations of the hot key over %d replicas: %v", dp.name, len(n), n)

			if got := one("x-tenant", "acme"); got != home {
				t.Errorf("hot key without a spread header on %s, want its home %s", got, home)
			}
			for _, s := range spreads[:16] {
				if got := one("x-tenant", "globex", bodykey.SpreadHeader, s); got != coldHome {
					t.Errorf("cold key with spread %s on %s, want its one replica %s", s, got, coldHome)
				}
			}
		})
	}
}

// distinct counts the requests per replica.
func distinct(ids []string) map[string]int {
	out := map[string]int{}
	for _, id := range ids {
		out[id]++
	}
	return out
}
