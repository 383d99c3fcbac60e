package translate

import (
	"regexp"
	"testing"

	"github.com/kvxds/kvxds/fleet"
)

// TestKeylessRoutes checks the route table of a hash pool: one route per
// key source to the hash cluster, in chain order, then the keyless route;
// and that the cookie matcher (RE2, full match, as in Envoy and gRPC)
// finds the cookie and nothing else.
func TestKeylessRoutes(t *testing.T) {
	f := fleet.Fleet{Pools: []fleet.Pool{{
		Name: "web", Settings: fleet.Settings{
			Port: 10000,
			Hash: fleet.Hash{Keys: []fleet.HashKey{{Header: "X-Session-ID"}, {Cookie: "s.id"}, {QueryParameter: "session"}}},
		},
	}}}
	r := mustTranslate(t, f, Envoy)
	routes := r.Routes[0].GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 4 {
		t.Fatalf("%d routes, want 4", len(routes))
	}
	for i, want := range []string{"web", "web", "web", "web/keyless"} {
		if got := routes[i].GetRoute().GetCluster(); got != want {
			t.Errorf("route %d goes to %q, want %q", i, got, want)
		}
	}
	if h := routes[0].GetMatch().GetHeaders(); len(h) != 1 || h[0].GetName() != "x-session-id" || !h[0].GetPresentMatch() {
		t.Errorf("route 0 matches %v, want x-session-id present", h)
	}
	if q := routes[2].GetMatch().GetQueryParameters(); len(q) != 1 || q[0].GetName() != "session" || !q[0].GetPresentMatch() {
		t.Errorf("route 2 matches %v, want query parameter session present", q)
	}
	last := routes[3]
	if len(last.GetMatch().GetHeaders()) != 0 || len(last.GetMatch().GetQueryParameters()) != 0 || len(last.GetRoute().GetHashPolicy()) != 0 {
		t.Errorf("keyless route must match everything and not hash: %v", last)
	}
	h := routes[1].GetMatch().GetHeaders()
	if len(h) != 1 || h[0].GetName() != "cookie" {
		t.Fatalf("route 1 matches %v, want the cookie header", h)
	}
	re := regexp.MustCompile(`^(?:` + h[0].GetStringMatch().GetSafeRegex().GetRegex() + `)$`)
	for cookie, want := range map[string]bool{
		"s.id=1":          true,
		"a=1; s.id=2":     true,
		"a=1;s.id=2; b=3": true,
		"a=1, s.id=2":     true,
		"s.id=":           true,
		"xs.id=1":         false,
		"a=s.id=1":        false,
		"sxid=1":          false, // the dot is literal
		"a=1; b=2":        false,
		"":                false,
	} {
		if got := re.MatchString(cookie); got != want {
			t.Errorf("cookie %q: matched %v, want %v", cookie, got, want)
		}
	}
}
