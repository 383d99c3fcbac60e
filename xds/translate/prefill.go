package translate

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// Prefill/decode disaggregation (fleet.Prefill) changes only the decode
// pool's Envoy resources. Its listener runs two more Lua filters before
// the router: the first computes the prefill pool's body keys into their
// own headers (PrefillKeyHeader; absent when the prefill pool keys on
// headers alone), the second (PrefillFilterName) picks the prefill
// replica from the first key present, by the decode pool's
// fleet.SlotTable, and names it in the prefill header. The table rides
// in the metadata of every route of the decode pool, under the second
// filter's name, so a change of the prefill side is one RDS update of the
// decode pool: no listener, cluster or endpoint changes.
//
// What a stateless data plane decides: a request whose declared body is
// shorter than min_body_bytes gets no header, so the decode replica
// prefills it itself. The filter cannot know what the decode replica
// holds in its own cache.
//
// A stale table names a replica that has left until the update lands
// (milliseconds); the routing sidecar then fails that prefill and the
// decode replica prefills locally. Proxyless gRPC clients set no header:
// they address the prefill pool and the decode pool as two targets.

// PrefillFilterName names the decode listener's Lua filter that sets the
// prefill header, and the route metadata namespace of its table.
const PrefillFilterName = "kvxds.prefill"

// prefillKeysFilterName names the Lua filter that computes the prefill
// pool's body keys on the decode listener.
const prefillKeysFilterName = "kvxds.prefill_keys"

// PrefillKeyHeader is the header of the prefill pool's body key at index i
// (from 0) of its chain, on the decode listener.
func PrefillKeyHeader(i int) string { return "x-kvxds-prefill-key-" + strconv.Itoa(i+1) }

// PrefillSpreadHeader carries, on the decode listener, the spread sub-key
// of the prefill pool's hot keys when it is a body key.
const PrefillSpreadHeader = "x-kvxds-prefill-spread"

// PrefillLogHeaders are the request headers of the prefill pool's key
// chain as the decode listener logs them, in chain order ("" for a key no
// header carries: cookies, query parameters).
func PrefillLogHeaders(t *fleet.SlotTable) []string {
	out := make([]string, len(t.Keys))
	for i, k := range t.Keys {
		switch {
		case k.Body():
			out[i] = PrefillKeyHeader(i)
		case k.Header != "":
			out[i] = strings.ToLower(k.Header)
		}
	}
	return out
}

// prefills reports whether kind's listener of p names prefill replicas.
func prefills(p *fleet.Pool, kind Kind) bool {
	return kind == Envoy && p.Prefill != nil && p.PrefillTable != nil
}

// prefillBodyKeys reports whether p's prefill pool keys on the body.
func prefillBodyKeys(p *fleet.Pool) bool {
	for _, k := range p.PrefillTable.Keys {
		if k.Body() {
			return true
		}
	}
	return false
}

// prefillFilters are the Lua filters of p's decode listener.
func prefillFilters(p *fleet.Pool) ([]*hcmv3.HttpFilter, error) {
	var out []*hcmv3.HttpFilter
	t := p.PrefillTable
	var keys []bodykey.Key
	var headers []bodykey.PrefillKey
	for i, k := range t.Keys {
		switch {
		case k.Body():
			h := PrefillKeyHeader(i)
			keys = append(keys, bodykey.Key{Header: h, JSONField: k.JSONField, PromptPrefix: k.PromptPrefix, Conversation: k.Conversation})
			headers = append(headers, bodykey.PrefillKey{Header: h, Index: i})
		case k.Header != "":
			headers = append(headers, bodykey.PrefillKey{Header: k.Header, Index: i})
		}
		// Cookies and query parameters are not read: a request keyed on
		// them alone gets a random prefill replica.
	}
	// The spread sub-key of the prefill pool's hot keys: a body key's
	// Spread computed by the keys filter, or a header's value.
	var spreadHeader string
	raw := false
	if by := t.SpreadBy; by != nil {
		switch {
		case by.Body():
			spreadHeader = PrefillSpreadHeader
			keys = append(keys, bodykey.Key{Header: spreadHeader, JSONField: by.JSONField, PromptPrefix: by.PromptPrefix, Conversation: by.Conversation, Spread: true})
		case by.Header != "":
			spreadHeader, raw = by.Header, true
		}
	}
	if len(keys) > 0 {
		src, err := bodykey.Lua(keys, prefillBodyLimit(p))
		if err != nil {
			return nil, fmt.Errorf("prefill keys: %w", err)
		}
		f, err := luaHTTPFilter(prefillKeysFilterName, "kvxds_prefill_keys", src)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	src, err := bodykey.LuaPrefill(bodykey.Prefill{Keys: headers, Header: p.Prefill.Header,
		MinBody: p.Prefill.MinBodyBytes, Slots: fleet.PrefillSlots, SpreadHeader: spreadHeader, SpreadRaw: raw,
		NameComputed: ObservesLoad(p, Envoy)})
	if err != nil {
		return nil, err
	}
	f, err := luaHTTPFilter(PrefillFilterName, "kvxds_prefill", src)
	if err != nil {
		return nil, err
	}
	return append(out, f), nil
}

// prefillBodyLimit is the longest body the prefill keys filter reads.
func prefillBodyLimit(p *fleet.Pool) int {
	if n := p.PrefillTable.MaxBodyBytes; n > 0 {
		return n
	}
	return fleet.DefaultAdapterBodyBytes
}

func luaHTTPFilter(name, stats, src string) (*hcmv3.HttpFilter, error) {
	cfg, err := typed(&luav3.Lua{
		StatPrefix:        stats,
		DefaultSourceCode: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: src}},
	})
	if err != nil {
		return nil, err
	}
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}}, nil
}

// prefillMetadata is the route metadata carrying p's prefill table.
func prefillMetadata(p *fleet.Pool) (*corev3.Metadata, error) {
	return tableMetadata(p.PrefillTable, PrefillFilterName)
}

// tableMetadata is the route metadata carrying slot table t to the Lua
// filter name.
func tableMetadata(t *fleet.SlotTable, name string) (*corev3.Metadata, error) {
	hosts := make([]any, len(t.Hosts))
	for i, h := range t.Hosts {
		hosts[i] = h
	}
	fields := map[string]any{"hosts": hosts, "slots": t.EncodeSlots()}
	if t.BalanceFactor > 0 {
		fields["balance"] = float64(t.BalanceFactor)
		if t.BalanceOn == fleet.BalanceOnPromptBytes {
			fields["bytes"] = true
		}
	}
	if t.Load != nil {
		// One string, parsed once per table by each Lua state: bytes in
		// flight per host, in hosts order.
		load := make([]string, len(t.Load))
		for i, n := range t.Load {
			load[i] = strconv.FormatUint(n, 10)
		}
		fields["load"] = strings.Join(load, ",")
		fields["load_lag"] = float64(t.LoadLag.Milliseconds())
		fields["load_at"] = float64(t.LoadAt.UnixMilli())
		fields["load_ttl"] = float64(t.LoadTTL.Milliseconds())
	}
	if t.Cached != nil {
		// One hex digit per host, in hosts order: its prefix-cache hit
		// rate in sixteenths.
		b := make([]byte, len(t.Cached))
		for i, c := range t.Cached {
			b[i] = "0123456789abcdef"[min(c, fleet.MaxCached)]
		}
		fields["cached"] = string(b)
	}
	if len(t.Adapters) > 0 {
		// Each adapter's replicas, "|", its ranking: three hex digits
		// per host index.
		ads := make(map[string]any, len(t.Adapters))
		for name, e := range t.Adapters {
			b := make([]byte, 0, 3*(len(e.Members)+len(e.Rank))+1)
			for _, i := range e.Members {
				b = fmt.Appendf(b, "%03x", i)
			}
			b = append(b, '|')
			for _, i := range e.Rank {
				b = fmt.Appendf(b, "%03x", i)
			}
			ads[name] = string(b)
		}
		fields["adapters"] = ads
	}
	if t.AdapterSlots != nil {
		// Three hex digits per host, in hosts order.
		b := make([]byte, 0, 3*len(t.AdapterSlots))
		for _, n := range t.AdapterSlots {
			b = fmt.Appendf(b, "%03x", min(n, 0xfff))
		}
		fields["adapter_slots"] = string(b)
	}
	if len(t.Went) > 0 {
		// One string, parsed with the load: per key, its hash's eight
		// hex digits and its host's index in three.
		b := make([]byte, 0, 11*len(t.Went))
		for _, w := range t.Went {
			b = fmt.Appendf(b, "%s%03x", w.Key, w.Host)
		}
		fields["went"] = string(b)
	}
	if t.Seen != "" {
		fields["seen"] = t.Seen
	}
	if t.Running != nil {
		// One string, parsed with the load: each host's adapters in
		// flight, space-separated, hosts tab-separated in hosts order.
		fields["running"] = strings.Join(t.Running, "\t")
	}
	if len(t.Hot) > 0 {
		hot := make(map[string]any, len(t.Hot))
		for _, k := range t.Hot {
			hot[strconv.Itoa(k.Key)+":"+k.Value] = k.Spread
		}
		fields["hot"] = hot
	}
	s, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, err
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{name: s}}, nil
}
