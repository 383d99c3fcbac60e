package translate

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// Body keys (json_field, prompt_prefix, conversation) are read from the
// JSON request body by a Lua filter that Envoy runs before the router: it
// removes every generated header (x-kvxds-key-N) the client sent, reads
// the body when the request declares a content-length within the pool's
// limit, and sets x-kvxds-key-N to the value of the N-th key of the chain
// when the body has it. The route then treats x-kvxds-key-N like any header key: a
// route matching its presence, and a terminal header hash policy in chain
// order. The Lua filter's header changes clear the route cache (its
// clear_route_cache defaults to true), so the route is chosen on the
// headers it set. The headers stay on the upstream request: they are
// opaque hashes.
//
// In a pool with hot keys, the filter also sets the spread header
// (fleet.DefaultSpreadHeader) from the body with the pool's SpreadBy key,
// as bodykey.Spread computes it; a well-formed one the client sent stays
// only when the body gives none. A pool with hot keys gets the filter
// even when its chain keys on headers alone: a hot tenant or session
// header is spread like a hot body key.
//
// In a pool placing adapters, the filter also copies the adapter body
// field into the adapter header (bodykey.LuaAdapter), after removing any
// the client sent, and names the reason in fleet.AdapterRejectedHeader
// when the field is present but names no adapter.
//
// Proxyless gRPC clients have no body: their routes skip body keys, and
// they send the adapter header themselves.

const luaFilterName = "envoy.filters.http.lua"

// envoyDefaultBufferLimit is Envoy's default per_connection_buffer_limit_bytes.
const envoyDefaultBufferLimit = 1 << 20

// bodyKeys reports whether kind computes body keys for p.
func bodyKeys(p *fleet.Pool, kind Kind) bool {
	if kind != Envoy || p.Balancer != fleet.ConsistentHash {
		return false
	}
	for _, k := range p.Hash.Keys {
		if k.Body() {
			return true
		}
	}
	return false
}

// routeKeys is p's key chain as kind's routes see it: body keys become
// their generated headers for Envoy, and are left out for gRPC clients
// (and for pools that do not hash).
func routeKeys(p *fleet.Pool, kind Kind) []fleet.HashKey {
	out := make([]fleet.HashKey, 0, len(p.Hash.Keys))
	body := bodyKeys(p, kind)
	for i, k := range p.Hash.Keys {
		switch {
		case !k.Body():
			out = append(out, k)
		case body:
			out = append(out, fleet.HashKey{Header: bodykey.Header(i)})
		}
	}
	return out
}

// adapterField reports whether kind's Lua filter copies p's adapter body
// field into the adapter header: Envoy, in a hash pool placing adapters.
func adapterField(p *fleet.Pool, kind Kind) bool {
	return kind == Envoy && p.Balancer == fleet.ConsistentHash && p.LoRA != nil
}

// luaFilter reports whether kind's listener of p runs the Lua filter:
// Envoy's, in a hash pool with body keys, hot keys or adapters.
func luaFilter(p *fleet.Pool, kind Kind) bool {
	return bodyKeys(p, kind) || adapterField(p, kind) ||
		(kind == Envoy && p.Balancer == fleet.ConsistentHash && p.Hash.Hot != nil)
}

// bodyLimit is the longest body p's Lua filter reads: the pool's body
// limit, or, in a pool without body keys, fleet.DefaultAdapterBodyBytes.
func bodyLimit(p *fleet.Pool) int {
	if p.Hash.MaxBodyBytes > 0 {
		return p.Hash.MaxBodyBytes
	}
	return fleet.DefaultAdapterBodyBytes
}

// bodyBufferLimit is the Envoy listener's per-connection buffer limit for
// a pool with the Lua filter: the stream's buffer limit, which caps what
// the filter may buffer. It is never below Envoy's default.
func bodyBufferLimit(p *fleet.Pool) uint32 {
	return uint32(max(bodyLimit(p), envoyDefaultBufferLimit))
}

// bodyKeyFilter is the Lua filter of p's body keys and spread sub-key.
func bodyKeyFilter(p *fleet.Pool) (*hcmv3.HttpFilter, error) {
	var keys []bodykey.Key
	for i, k := range p.Hash.Keys {
		if k.Body() {
			keys = append(keys, bodykey.Key{Header: bodykey.Header(i), JSONField: k.JSONField, PromptPrefix: k.PromptPrefix, Conversation: k.Conversation})
		}
	}
	// A pool with hot keys also gets its spread sub-key from the body.
	if h := p.Hash.Hot; h != nil {
		s := h.SpreadBy
		keys = append(keys, bodykey.Key{Header: fleet.DefaultSpreadHeader, JSONField: s.JSONField, PromptPrefix: s.PromptPrefix, Conversation: s.Conversation, Spread: true})
	}
	var adapter *bodykey.Adapter
	if a := p.LoRA; a != nil {
		adapter = &bodykey.Adapter{Header: a.Header, Rejected: fleet.AdapterRejectedHeader, Field: a.BodyField,
			BaseModels: a.BaseModels, MaxName: fleet.MaxAdapterName}
	}
	src, err := bodykey.LuaAdapter(keys, bodyLimit(p), adapter)
	if err != nil {
		return nil, err
	}
	cfg, err := typed(&luav3.Lua{
		StatPrefix: "kvxds_body_keys",
		DefaultSourceCode: &corev3.DataSource{
			Specifier: &corev3.DataSource_InlineString{InlineString: src},
		},
	})
	if err != nil {
		return nil, err
	}
	return &hcmv3.HttpFilter{Name: luaFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}}, nil
}
