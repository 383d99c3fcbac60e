package translate

import (
	"fmt"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// A hash pool whose bound counts prompt bytes (fleet.BalanceOnPromptBytes)
// gets, on Envoy, a Lua filter after its keys filter (PickFilterName)
// that picks each request's replica itself: the first key present picks
// a slot of the pool's own slot table (fleet.NewSlotTable over the
// pool, the same on every Envoy and every kvxds instance), bounded as the
// prefill table is on the bytes in flight from its Lua state, and the
// replica becomes the request's upstream host, not strict. Envoy's bound
// counts requests, and prompts differ a hundredfold in what they cost;
// the filter counts what a replica was sent to compute.
//
// The table rides in the metadata of the pool's routes, so a change is
// one RDS update. The cluster keeps its hash table and bound: a request
// without a table (a route not yet updated), or whose override host the
// cluster lacks or holds unhealthy (a stale table), is hashed as before.
// Pools with tenant groups do not get it: an override must not leave a
// group's replicas. A pool's adapters do: the table carries each placed
// adapter's replicas and ranking (fleet.AdapterPick), Envoy gets no
// adapter routes or clusters, and a request naming an adapter picks among
// its replicas, then, over their bound, along its ranking, rather than
// wait behind its own replicas; there it prefers a replica where its
// adapter is in flight or a slot is free (the load log names each
// request's adapter, and the table carries each host's slots and
// adapters in flight).
// gRPC clients run no filter and keep the clusters' own hashing.

// PickFilterName names the Lua filter that picks a hash pool's replica by
// its slot table, and the route metadata namespace of the table.
const PickFilterName = "kvxds.pick"

// Picks reports whether kind's listener of p picks replicas by p's slot
// table.
func Picks(p *fleet.Pool, kind Kind) bool {
	return kind == Envoy && p.Balancer == fleet.ConsistentHash && p.Hash.BalanceFactor > 0 &&
		p.Hash.BalanceOn == fleet.BalanceOnPromptBytes && p.Prefill == nil && len(p.Groups) == 0
}

// ObservesLoad reports whether kind's listener of p reports its requests
// in flight to kvxds (loadAccessLog): a pick pool with a load interval,
// or a decode pool whose prefill pool is one (PrefillLoad).
func ObservesLoad(p *fleet.Pool, kind Kind) bool {
	return Picks(p, kind) && p.Hash.LoadInterval > 0 || PrefillLoad(p, kind)
}

// PrefillLoad reports whether kind's listener of decode pool p reports
// its requests to kvxds as load on the prefill replicas it names: its
// prefill pool bounds prompt bytes with a load interval. Its load log's
// entries then count against the replica in the prefill header, from the
// request until the decode replica's response starts (the prefill filter
// names it computed), and kvxds serves the prefill pool's figures in the
// decode pool's table.
func PrefillLoad(p *fleet.Pool, kind Kind) bool {
	if !prefills(p, kind) {
		return false
	}
	t := p.PrefillTable
	return t.BalanceFactor > 0 && t.BalanceOn == fleet.BalanceOnPromptBytes && t.LoadInterval > 0
}

// LoadLogPrefix starts the log name of a pool's load log: pool "chat"
// logs as "kvxds-load/chat". The access log service reads the pool back
// from it.
const LoadLogPrefix = "kvxds-load/"

// LoadLogName is the load log name of pool's Envoy router.
func LoadLogName(pool string) string { return LoadLogPrefix + pool }

// The request headers the load log carries: the id that pairs an
// attempt's start and end entries (Envoy sets x-request-id on every
// request that lacks one), and the body's length, what the attempt costs.
const (
	LoadLogRequestID = "x-request-id"
	LoadLogLength    = "content-length"
	// LoadLogComputed names, on a request, the request ids of earlier
	// requests from the same pick filter state whose response body
	// started: their prompts are computed (bodykey.ComputedHeader).
	LoadLogComputed = bodykey.ComputedHeader
	// LoadLogWent is, on a request the pick filter placed by its key,
	// the key's hash and whether it went away from its slot's replica.
	LoadLogWent = bodykey.WentHeader
	// LoadLogMaxComputed bounds the ids one entry names; the rest of a
	// longer list are not read.
	LoadLogMaxComputed = bodykey.MaxComputed
)

// WentAway splits a LoadLogWent value into the key's hash, whether the
// request went away from its slot's replica, and whether it followed its
// key there (bodykey.WentAway).
func WentAway(v string) (key string, away, followed bool) { return bodykey.WentAway(v) }

// loadAccessLog is the router's upstream log through which Envoy reports
// each request of p when its upstream stream starts (UpstreamPoolReady,
// with flush_upstream_log_on_upstream_stream) and ends (UpstreamEnd), so
// that kvxds counts every replica's prompt bytes in flight across its
// Envoys and serves them back in the pick table (fleet.SlotTable.Load).
// It is flushed every tenth of the load interval: a start reaches kvxds
// within that, and the next table within one interval.
func loadAccessLog(p *fleet.Pool) (*accesslogv3.AccessLog, error) {
	logCluster := fleet.DefaultLogCluster
	if p.Hash.Hot != nil {
		logCluster = p.Hash.Hot.LogCluster
	}
	headers := []string{LoadLogRequestID, LoadLogLength, LoadLogComputed, LoadLogWent}
	if p.LoRA != nil {
		// The adapter the request names, which the pick filter set.
		headers = append(headers, p.LoRA.Header)
	}
	flush := fleet.LoadLogFlush(p.Hash)
	if PrefillLoad(p, Envoy) {
		// The prefill replica the request loads, which the prefill
		// filter named; at the prefill pool's pace.
		headers = append(headers, p.Prefill.Header)
		flush = fleet.LoadLogFlush(fleet.Hash{LoadInterval: p.PrefillTable.LoadInterval})
	}
	return grpcAccessLog(LoadLogName(p.Name), logCluster, flush, headers)
}

// PickTable is the slot table kind's listener of p picks replicas by, or
// nil for none.
func PickTable(p *fleet.Pool, kind Kind) *fleet.SlotTable {
	if !Picks(p, kind) {
		return nil
	}
	return fleet.NewSlotTable(p, &fleet.Pool{})
}

// pickFilter is the Lua filter that picks p's replica: it reads the keys
// the body keys filter (which runs first) leaves in their headers.
func pickFilter(p *fleet.Pool) (*hcmv3.HttpFilter, error) {
	var keys []bodykey.PrefillKey
	for i, k := range p.Hash.Keys {
		switch {
		case k.Body():
			keys = append(keys, bodykey.PrefillKey{Header: bodykey.Header(i), Index: i})
		case k.Header != "":
			keys = append(keys, bodykey.PrefillKey{Header: k.Header, Index: i})
		}
		// Cookies and query parameters are not read: a request keyed on
		// them alone is hashed by the cluster.
	}
	var spreadHeader string
	raw := false
	if h := p.Hash.Hot; h != nil {
		switch by := h.SpreadBy; {
		case by.Body():
			spreadHeader = fleet.DefaultSpreadHeader
		case by.Header != "":
			spreadHeader, raw = by.Header, true
		}
	}
	var adapterHeader string
	if p.LoRA != nil {
		adapterHeader = p.LoRA.Header
	}
	src, err := bodykey.LuaPrefill(bodykey.Prefill{Keys: keys, Override: true, Slots: fleet.PrefillSlots,
		SpreadHeader: spreadHeader, SpreadRaw: raw, AdapterHeader: adapterHeader,
		UntilEnd: p.LoRA != nil, NameComputed: ObservesLoad(p, Envoy)})
	if err != nil {
		return nil, err
	}
	return luaHTTPFilter(PickFilterName, "kvxds_pick", src)
}

// pickTable is PickTable with the entries of p's routed adapters, of
// plan pl (fleet.SlotTable.PickAdapters).
func pickTable(p *fleet.Pool, pl *fleet.Plan, kind Kind) *fleet.SlotTable {
	t := PickTable(p, kind)
	if t == nil || p.LoRA == nil {
		return t
	}
	var routed []fleet.AdapterPlan
	for i, a := range p.Adapters {
		if a.Routed() && i < len(pl.Adapters) {
			routed = append(routed, pl.Adapters[i])
		}
	}
	t.PickAdapters(p, routed)
	return t
}

// pickMetadata is the route metadata carrying table t.
func pickMetadata(t *fleet.SlotTable) (*corev3.Metadata, error) {
	md, err := tableMetadata(t, PickFilterName)
	if err != nil {
		return nil, fmt.Errorf("pick table: %w", err)
	}
	return md, nil
}
