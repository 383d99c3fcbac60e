package translate

import (
	"strings"
	"testing"

	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

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

// An Envoy pool keyed on headers alone runs the Lua filter when it has
// hot keys, for the spread sub-key alone, within the default body limit;
// without hot keys, and for gRPC clients, it runs none.
func TestHotKeysLuaFilterOnHeaderKeys(t *testing.T) {
	for _, hot := range []bool{true, false} {
		p := fleet.Pool{Name: "p", Settings: fleet.Settings{Port: 1000, Hash: fleet.Hash{
			Keys: []fleet.HashKey{{Header: "x-tenant"}},
		}}}
		if hot {
			h := fleet.DefaultHotKeys()
			p.Hash.Hot = &h
		}
		m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{p}})
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range Kinds {
			r, err := Translate(m, kind)
			if err != nil {
				t.Fatal(err)
			}
			l := r.Listeners[0]
			var hcm hcmv3.HttpConnectionManager
			if kind == Envoy {
				err = l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm)
			} else {
				err = l.GetApiListener().GetApiListener().UnmarshalTo(&hcm)
			}
			if err != nil {
				t.Fatal(err)
			}
			want := hot && kind == Envoy
			first := hcm.GetHttpFilters()[0]
			if got := first.GetName() == luaFilterName; got != want {
				t.Errorf("hot keys %v, %v: Lua filter %v, want %v", hot, kind, got, want)
			}
			if got := l.GetPerConnectionBufferLimitBytes().GetValue(); want && got != fleet.DefaultMaxBodyBytes || !want && got != 0 {
				t.Errorf("hot keys %v, %v: buffer limit %d", hot, kind, got)
			}
			if !want {
				continue
			}
			var lua luav3.Lua
			if err := first.GetTypedConfig().UnmarshalTo(&lua); err != nil {
				t.Fatal(err)
			}
			src := lua.GetDefaultSourceCode().GetInlineString()
			for _, s := range []string{`{header = "x-kvxds-spread", conversation = true, spread = true}`, "local MAX_BODY = 4194304"} {
				if !strings.Contains(src, s) {
					t.Errorf("the filter lacks %q", s)
				}
			}
			if strings.Contains(src, bodykey.HeaderPrefix) {
				t.Error("the filter sets a body key the chain does not have")
			}
		}
	}
}
