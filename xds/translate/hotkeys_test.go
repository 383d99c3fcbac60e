package translate

import (
	"testing"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/bootstrap"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// The model states names the layers below it own; they must agree.
func TestHotKeyNames(t *testing.T) {
	if fleet.DefaultSpreadHeader != bodykey.SpreadHeader || fleet.SpreadBits != bodykey.SpreadBits {
		t.Errorf("spread header %q/%d, bodykey's %q/%d", fleet.DefaultSpreadHeader, fleet.SpreadBits, bodykey.SpreadHeader, bodykey.SpreadBits)
	}
	if fleet.DefaultLogCluster != bootstrap.XDSClusterName {
		t.Errorf("default log cluster %q, bootstrap's xDS cluster %q", fleet.DefaultLogCluster, bootstrap.XDSClusterName)
	}
}

// A hot key of a chain whose earlier key is a query parameter cannot be
// told apart from it (a route cannot require a parameter absent): it
// gets no route, and the pool serves it as a cold key.
func TestHotKeyAfterQueryParameter(t *testing.T) {
	hot := fleet.DefaultHotKeys()
	p := fleet.Pool{Name: "p", Settings: fleet.Settings{Port: 1000, Hash: fleet.Hash{
		Keys: []fleet.HashKey{{QueryParameter: "session"}, {Header: "x-tenant"}}, Hot: &hot,
	}}, HotKeys: []fleet.HotKey{{Key: 1, Value: "acme", Spread: 4}}}
	m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{p}})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range Kinds {
		r, err := Translate(m, kind)
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range r.Routes[0].GetVirtualHosts()[0].GetRoutes() {
			for _, hm := range rt.GetMatch().GetHeaders() {
				if hm.GetStringMatch().GetExact() == "acme" {
					t.Errorf("%v: a hot route after a query parameter key", kind)
				}
			}
		}
	}
}
